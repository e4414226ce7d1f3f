// What the web UI's template editor (admin_ui/static/code_editor.js) uses from CodeMirror 6.
// build.sh bundles this file and everything it imports into codemirror.js (one ES module).
export { EditorState, Compartment } from "@codemirror/state";
export {
  EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  highlightSpecialChars, drawSelection,
} from "@codemirror/view";
export { syntaxHighlighting, defaultHighlightStyle, bracketMatching, indentOnInput } from "@codemirror/language";
export { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
export { autocompletion, completionKeymap, closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
export { setDiagnostics, lintGutter, lintKeymap } from "@codemirror/lint";
export { jinja, jinjaCompletionSource } from "@codemirror/lang-jinja";
