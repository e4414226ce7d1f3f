// mcp-registry web UI: a code editor (CodeMirror 6, vendored in vendor/codemirror/) for the
// template fields, textarea[data-code-editor="jinja"]: line numbers, Jinja highlighting, the live
// check's problems marked at their line, and completion of the declared argument names inside
// {{ }} and {% %}.
//
// Progressive enhancement: the textarea stays in the form and is what posts. The editor is drawn
// in front of it (the textarea is hidden), and every change of the editor's text is written to
// the textarea at once and announced with a bubbling `input` event, so whatever follows the
// form's edits (the htmx live check, draft keeping) sees it as if typed there. The other way round,
// code that sets the textarea's value (a draft offered back) dispatches an `input` event on it and
// the editor takes the new text. Without JavaScript (or if this module fails to load) the
// textarea is the editor.
//
// Tab is left to the browser (no indentWithTab): Tab and Shift-Tab move the focus on.
// CodeMirror styles itself with <style> elements: they carry the page's CSP style nonce
// (<meta property="csp-nonce">, see registry/ui/security.py).
import {
  EditorState, EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter,
  highlightSpecialChars, drawSelection, syntaxHighlighting, defaultHighlightStyle, bracketMatching,
  indentOnInput, defaultKeymap, history, historyKeymap, autocompletion, completionKeymap,
  closeBrackets, closeBracketsKeymap, setDiagnostics, lintGutter, lintKeymap, jinja,
  jinjaCompletionSource,
} from "./vendor/codemirror/codemirror.js";

const views = new Map(); // textarea -> EditorView

function styleNonce() {
  const meta = document.querySelector('meta[property="csp-nonce"]');
  return meta ? meta.nonce || meta.getAttribute("nonce") || "" : "";
}

// The argument names the form declares now (the arguments table's name fields).
function declaredArguments(form) {
  const names = [];
  if (!form) { return names; }
  form.querySelectorAll('input[name^="arg-"][name$="-name"]').forEach((input) => {
    const name = input.value.trim();
    if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && names.indexOf(name) < 0) { names.push(name); }
  });
  return names;
}

// Where the cursor is in a Jinja tag: null outside one, else {kind: "{{" or "{%", start: the tag's
// text before the cursor}. Looked for in the text just before the cursor (a tag is short).
function openTag(state, pos) {
  const before = state.sliceDoc(Math.max(0, pos - 2000), pos);
  const open = Math.max(before.lastIndexOf("{{"), before.lastIndexOf("{%"));
  if (open < 0) { return null; }
  const inside = before.slice(open + 2);
  if (/}}|%}/.test(inside)) { return null; }
  return { kind: before.slice(open, open + 2), inside };
}

// Completion: the declared arguments inside {{ }} and {% %} (as soon as the tag is open, before a
// letter is typed), the rest (filters, tags, Jinja's own names) as lang-jinja offers them; nothing
// in the prose around the tags.
function completionSource(form) {
  const builtIn = jinjaCompletionSource();
  return (context) => {
    const tag = openTag(context.state, context.pos);
    if (!tag) { return null; }
    const word = context.matchBefore(/[A-Za-z_][A-Za-z0-9_]*$/);
    const beforeWord = tag.inside.slice(0, word ? tag.inside.length - (word.to - word.from) : tag.inside.length);
    // After "." or "|" it is an attribute or a filter: lang-jinja's business.
    if (/[.|]\s*$/.test(beforeWord)) { return builtIn(context); }
    // The first word of {% %} is the tag's name (if, for, set, ...).
    if (tag.kind === "{%" && /^-?\s*$/.test(beforeWord)) { return builtIn(context); }
    if (!word && !context.explicit && !/\s$/.test(tag.inside) && tag.inside !== "") { return null; }
    const options = declaredArguments(form).map((name) => ({
      label: name, type: "variable", detail: "argument", boost: 10,
    }));
    if (!options.length) { return null; }
    return { from: word ? word.from : context.pos, options, validFor: /^[A-Za-z0-9_]*$/ };
  };
}

// The live check's problems for this textarea (li[data-where][data-line] in #check-results) as
// diagnostics at their line.
function diagnosticsFor(textarea, state) {
  const where = textarea.getAttribute("data-where");
  const found = [];
  if (!where) { return found; }
  document.querySelectorAll("#check-results li.issue[data-line]").forEach((item) => {
    if (item.getAttribute("data-where") !== where) { return; }
    const number = parseInt(item.getAttribute("data-line"), 10);
    if (!(number >= 1)) { return; }
    const line = state.doc.line(Math.min(number, state.doc.lines));
    const what = item.querySelector(".what");
    found.push({
      from: line.from,
      to: line.to,
      severity: "error",
      message: `Line ${number}: ${(what ? what.textContent : item.textContent).trim()}`,
      source: "check",
    });
  });
  return found;
}

function markProblems() {
  views.forEach((view, textarea) => {
    view.dispatch(setDiagnostics(view.state, diagnosticsFor(textarea, view.state)));
  });
}

function enhance(textarea) {
  if (views.has(textarea)) { return; }
  const form = textarea.form;
  const label = textarea.id ? document.querySelector(`label[for="${CSS.escape(textarea.id)}"]`) : null;
  if (label && !label.id) { label.id = `${textarea.id}-label`; }
  let writing = false;
  const contentAttributes = { spellcheck: "false" };
  if (label) { contentAttributes["aria-labelledby"] = label.id; }
  const described = textarea.getAttribute("aria-describedby");
  if (described) { contentAttributes["aria-describedby"] = described; }
  const view = new EditorView({
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        EditorView.cspNonce.of(styleNonce()),
        lineNumbers(),
        highlightActiveLineGutter(),
        highlightSpecialChars(),
        history(),
        drawSelection(),
        indentOnInput(),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        bracketMatching(),
        closeBrackets(),
        autocompletion({ override: [completionSource(form)], icons: false }),
        highlightActiveLine(),
        lintGutter(),
        jinja(),
        EditorView.lineWrapping,
        EditorView.contentAttributes.of(contentAttributes),
        EditorView.editorAttributes.of({ class: "code-editor" }),
        keymap.of([...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, ...completionKeymap, ...lintKeymap]),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) { return; }
          // At once, in the same turn as the change: the textarea is what the form posts.
          writing = true;
          try {
            textarea.value = update.state.doc.toString();
            textarea.dispatchEvent(new Event("input", { bubbles: true }));
          } finally {
            writing = false;
          }
        }),
      ],
    }),
  });
  textarea.after(view.dom);
  textarea.hidden = true;
  textarea.setAttribute("data-code-editor-on", "");
  // Something else may set the textarea (a draft offered back): the editor follows it.
  const follow = () => {
    if (writing) { return; }
    const text = textarea.value;
    if (text !== view.state.doc.toString()) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    }
  };
  textarea.addEventListener("input", follow);
  textarea.addEventListener("change", follow);
  // The label names the hidden textarea: a click on it goes to the editor.
  if (label) { label.addEventListener("click", (event) => { event.preventDefault(); view.focus(); }); }
  views.set(textarea, view);
  view.dispatch(setDiagnostics(view.state, diagnosticsFor(textarea, view.state)));
}

function enhanceAll(root) {
  if (root.matches && root.matches('textarea[data-code-editor="jinja"]')) { enhance(root); }
  if (root.querySelectorAll) { root.querySelectorAll('textarea[data-code-editor="jinja"]').forEach(enhance); }
}

// Editors whose textarea left the page (rows swapped by a row button) are let go.
function forgetGone() {
  views.forEach((view, textarea) => {
    if (!textarea.isConnected) {
      view.destroy();
      views.delete(textarea);
    }
  });
}

enhanceAll(document);
document.addEventListener("htmx:load", (event) => { enhanceAll(event.target); });
document.addEventListener("htmx:afterSettle", () => { forgetGone(); markProblems(); });
