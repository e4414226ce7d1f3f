// mcp-registry web UI: drafts. An entry editor's form is kept in this browser (localStorage) while
// it is edited, so that nothing typed is lost when the session ends (token revoked, session
// expired), the tab is closed, or a save is refused: the editor offers it back when it is opened
// again. Without this file (or without storage) the editors work as before, with nothing kept.
//
// - Whose: every key names the signed-in person (<body data-draft-owner>: a token's name or a
//   single sign-on subject, never a secret) and the entry (kind and name; "" for a new one), so
//   nobody signed in on the same browser is offered someone else's text. Signing out drops that
//   person's drafts (a shared computer keeps nothing of theirs).
// - What: the form's fields (minus the CSRF token, files and write-only fields: password fields
//   and [data-write-only] ones; secrets are never stored), the version the form started from
//   (base_version) and the time; kept on every pause in typing, on submit and when the page goes.
//   A page whose form is unchanged keeps nothing.
// - Offered back on a fresh editor page (data-draft-from="entry") when it differs from the form.
//   "Restore them" posts the draft to the editor with op=restore, as the row buttons post a form:
//   the server renders the form from it (rows and all) with this page's CSRF token; its
//   base_version comes with it, so a save on top of a newer version shows the conflict view.
// - Dropped when a save succeeds (the next page carries <body data-draft-saved>), on "Discard"
//   and at sign-out. Bounded: MAX_DRAFTS drafts (oldest dropped first), MAX_DRAFT_CHARS each.
// - Leaving an editor with changes asks first (beforeunload); submitting it does not.
(function () {
  "use strict";

  var PREFIX = "mcpr-draft:";
  var MAX_DRAFTS = 20;
  var MAX_DRAFT_CHARS = 256 * 1024;
  var KEEP_DELAY_MS = 300;

  // Set when this page is going away on purpose (a restore, "Sign in again", sign-out).
  var leaving = false;
  var signingOut = false;

  function store() {
    try {
      var storage = window.localStorage;
      return storage || null;
    } catch (e) {
      return null;  // storage turned off: nothing is kept
    }
  }

  function keyOf(owner, kind, name) { return PREFIX + JSON.stringify([owner, kind, name]); }

  function partsOf(key) {
    try {
      var parts = JSON.parse(key.slice(PREFIX.length));
      return Array.isArray(parts) && parts.length === 3 ? parts : null;
    } catch (e) {
      return null;
    }
  }

  function readDraft(key) {
    var storage = store();
    if (!storage) { return null; }
    try {
      var draft = JSON.parse(storage.getItem(key) || "null");
      if (draft && Array.isArray(draft.fields) && typeof draft.saved_at === "number") { return draft; }
    } catch (e) { /* not ours, or damaged: treated as none */ }
    return null;
  }

  function removeDraft(key) {
    var storage = store();
    if (storage) { try { storage.removeItem(key); } catch (e) { /* nothing to do */ } }
  }

  function allDrafts() {
    var storage = store();
    var found = [];
    if (!storage) { return found; }
    for (var i = 0; i < storage.length; i++) {
      var key = storage.key(i);
      if (key && key.indexOf(PREFIX) === 0) { found.push({ key: key, draft: readDraft(key) }); }
    }
    return found;
  }

  // "kept", "too-large" or "failed" (no storage, or full even after dropping every other draft).
  function writeDraft(key, draft) {
    var storage = store();
    if (!storage) { return "failed"; }
    var text = JSON.stringify(draft);
    if (text.length > MAX_DRAFT_CHARS) {
      removeDraft(key);  // an older, shorter draft of this form would come back as if it were current
      return "too-large";
    }
    var others = allDrafts().filter(function (found) { return found.key !== key; });
    others.sort(function (a, b) {
      return (a.draft ? a.draft.saved_at : 0) - (b.draft ? b.draft.saved_at : 0);
    });
    while (others.length > MAX_DRAFTS - 1) { removeDraft(others.shift().key); }
    for (;;) {
      try {
        storage.setItem(key, text);
        return "kept";
      } catch (e) {
        if (!others.length) { return "failed"; }
        removeDraft(others.shift().key);  // the browser's quota: the oldest draft goes first
      }
    }
  }

  // The form's fields as [name, value] pairs: not the CSRF token, files, or (unless
  // withSecrets) what is typed into a write-only field: a password field (a webhook's secret and
  // header values) or one marked data-write-only (an http resource's header values, shown as
  // text). Those never go into storage; a write-only field still holding the mask the page drew
  // for a stored value (data-write-only's value, "********") is kept: it says "keep what is
  // stored", no secret, and a restored draft without it would replace the stored value.
  function fieldsOf(form, withSecrets) {
    var secret = {};
    if (!withSecrets) {
      form.querySelectorAll('input[type="password"], [data-write-only]').forEach(function (input) {
        var mask = input.getAttribute("data-write-only");
        if (!mask || input.value !== mask) { secret[input.name] = true; }
      });
    }
    var pairs = [];
    new FormData(form).forEach(function (value, name) {
      if (typeof value !== "string" || name === "csrf_token" || name === "op" || secret[name]) { return; }
      pairs.push([name, value]);
    });
    return pairs;
  }

  function fieldOf(draft, name) {
    for (var i = 0; i < draft.fields.length; i++) {
      if (draft.fields[i][0] === name) { return String(draft.fields[i][1]); }
    }
    return "";
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function when(ms) {
    var moment = new Date(ms);
    var time = pad(moment.getHours()) + ":" + pad(moment.getMinutes());
    if (moment.toDateString() === new Date().toDateString()) { return time; }
    return moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" + pad(moment.getDate()) + " " + time;
  }

  function setUpEditor(form, owner) {
    var kind = form.getAttribute("data-draft-kind") || "";
    var name = form.getAttribute("data-draft-name") || "";
    var url = form.getAttribute("data-draft-url") || "";
    var key = keyOf(owner, kind, name);
    // A form rendered from a post (a row button, a refused save, a conflict, a restore) holds
    // edits that are not saved: it counts as changed from the start.
    var fromPost = form.getAttribute("data-draft-from") !== "entry";
    var loaded = JSON.stringify(fieldsOf(form, true));
    var loadedKept = JSON.stringify(fieldsOf(form, false));
    var submitting = false;
    var ended = false;
    var offered = null;
    var kept = "none";
    var timer = null;

    function changed() { return fromPost || JSON.stringify(fieldsOf(form, true)) !== loaded; }

    function keep() {
      clearTimeout(timer);
      if (signingOut) { return; }
      if (!changed()) {
        if (!offered) { removeDraft(key); }  // back to what was loaded: nothing unsaved
        kept = "none";
        return;
      }
      var base = form.querySelector('input[name="base_version"]');
      kept = writeDraft(key, {
        v: 1,
        kind: kind,
        name: name,
        url: url,
        fields: fieldsOf(form, false),
        base_version: base ? base.value : "",
        saved_at: Date.now()
      });
    }

    function keepSoon() {
      signingOut = false;  // typing again after a sign-out that was not confirmed
      clearTimeout(timer);
      timer = setTimeout(keep, KEEP_DELAY_MS);
    }

    form.addEventListener("input", keepSoon);
    form.addEventListener("change", keepSoon);
    form.addEventListener("submit", function () {
      submitting = true;
      keep();
    });
    window.addEventListener("pagehide", keep);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") { keep(); }
    });
    window.addEventListener("beforeunload", function (event) {
      if (submitting || leaving || !changed()) { return; }
      keep();
      event.preventDefault();
      event.returnValue = "";  // older browsers ask only when a value is set
    });

    // The session ended while this page was open: ui.js put the alert in #session-ended. Keep the
    // draft now, say so only if it was kept, and send no more checks (each would answer the same).
    document.addEventListener("htmx:afterSwap", function (event) {
      var target = event.detail && event.detail.target;
      if (!target || target.id !== "session-ended") { return; }
      ended = true;
      keep();
      var said = target.querySelector("[data-draft-kept]");
      if (said && changed() && kept !== "kept") {
        said.textContent = kept === "too-large"
          ? "This form is too large to keep in this browser: copy your edits before you leave the page."
          : "This browser could not keep your edits: copy them before you leave the page.";
      }
    });
    document.addEventListener("htmx:beforeRequest", function (event) {
      var elt = event.detail && event.detail.elt;
      if (ended && elt && (elt === form || form.contains(elt))) { event.preventDefault(); }
    });

    var box = document.getElementById("draft-offer");
    if (fromPost || !box) { return; }
    var stored = readDraft(key);
    if (!stored) { return; }
    if (JSON.stringify(stored.fields) === loadedKept) {
      removeDraft(key);  // it says what the form says: nothing to offer
      return;
    }
    offered = stored;
    var version = stored.base_version ? " (version " + stored.base_version + ")" : "";
    var text = "You have unsaved edits from " + when(stored.saved_at) + version + ".";
    var base = form.querySelector('input[name="base_version"]');
    var now = base ? Number(base.value) : 0;
    if (stored.base_version && now > Number(stored.base_version)) {
      text += " Version " + now + " has been saved since: if you restore them, saving first shows what changed.";
    }
    document.getElementById("draft-offer-text").textContent = text;
    box.hidden = false;
    box.setAttribute("tabindex", "-1");
    box.focus();

    document.getElementById("draft-restore").addEventListener("click", function () {
      var post = document.createElement("form");
      post.method = "post";
      post.action = form.getAttribute("action");
      post.enctype = form.enctype;
      post.hidden = true;
      var csrf = form.querySelector('input[name="csrf_token"]');
      var fields = [["csrf_token", csrf ? csrf.value : ""], ["op", "restore"]].concat(offered.fields);
      fields.forEach(function (pair) {
        var field = document.createElement("textarea");  // keeps line breaks as typed
        field.name = pair[0];
        field.value = String(pair[1]);
        post.appendChild(field);
      });
      document.body.appendChild(post);
      leaving = true;
      post.submit();
    });

    document.getElementById("draft-discard").addEventListener("click", function () {
      var still = readDraft(key);
      if (still && still.saved_at === offered.saved_at) { removeDraft(key); }
      offered = null;
      box.hidden = true;
      var first = form.querySelector("input:not([type=hidden]):not([hidden]), textarea, select");
      if (first) { first.focus(); }
    });
  }

  // The page after a successful save: the draft of what was saved goes (a new entry's too, if it
  // was of this name).
  function dropSaved(owner, marker) {
    var saved;
    try { saved = JSON.parse(marker); } catch (e) { return; }
    if (!saved || typeof saved.kind !== "string" || typeof saved.name !== "string") { return; }
    removeDraft(keyOf(owner, saved.kind, saved.name));
    if (saved.created) {
      var fresh = keyOf(owner, saved.kind, "");
      var draft = readDraft(fresh);
      if (draft && fieldOf(draft, "name").trim() === saved.name) { removeDraft(fresh); }
    }
  }

  function dropAllOf(owner) {
    allDrafts().forEach(function (found) {
      var parts = partsOf(found.key);
      if (parts && parts[0] === owner) { removeDraft(found.key); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var body = document.body;
    var owner = body.getAttribute("data-draft-owner");

    // The sign-in page after a refused save says the edits were kept, when this browser has them.
    document.querySelectorAll("[data-drafts-kept-for]").forEach(function (note) {
      var url = note.getAttribute("data-drafts-kept-for");
      note.hidden = !allDrafts().some(function (found) { return found.draft && found.draft.url === url; });
    });

    // "Sign in again" (the session-ended alert) replaces this page in the history: Back after
    // signing in does not come back to a page whose session is gone.
    document.addEventListener("click", function (event) {
      var link = event.target && event.target.closest ? event.target.closest("a[data-sign-in-again]") : null;
      if (!link || event.defaultPrevented || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) {
        return;
      }
      event.preventDefault();
      leaving = true;
      window.location.replace(link.href);
    });

    if (!owner) { return; }
    var marker = body.getAttribute("data-draft-saved");
    if (marker) { dropSaved(owner, marker); }

    document.querySelectorAll('form[action="/ui/signout"]').forEach(function (signout) {
      signout.addEventListener("submit", function () {
        signingOut = true;
        dropAllOf(owner);
      });
    });

    var form = document.getElementById("editor");
    // After the other scripts' DOMContentLoaded work (which may set fields), so that the form
    // as loaded is what "changed" compares with.
    if (form && form.hasAttribute("data-draft-kind")) { setTimeout(function () { setUpEditor(form, owner); }, 0); }
  });
})();
