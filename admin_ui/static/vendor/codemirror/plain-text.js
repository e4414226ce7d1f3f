// Stands in for @codemirror/lang-html when bundling (build.sh: --alias). @codemirror/lang-jinja
// parses Jinja over a base language, HTML unless told otherwise, and imports lang-html (with
// lang-css and lang-javascript, about 190 kB minified) even when another base is given. Prompt
// templates are plain text, so the base here is plain text: the bundle is a third smaller and
// "a < b" in prose is not read as a tag.
import { LanguageSupport, StreamLanguage } from "@codemirror/language";

const plainText = StreamLanguage.define({
  name: "text",
  token(stream) {
    stream.skipToEnd();
    return null;
  },
});

export function html() {
  return new LanguageSupport(plainText);
}
