// mcp-registry web UI: the entry editor. Without this file every field is shown and the row
// buttons post the form back; with it, a message shows only the fields of its content type.
(function () {
  "use strict";

  function showFieldsOf(message) {
    var select = message.querySelector("select.content-type");
    if (!select) { return; }
    var type = select.value;
    message.setAttribute("data-type", type);
    message.querySelectorAll(".for-text, .for-resource, .for-media").forEach(function (field) {
      var wanted = (type === "text" && field.classList.contains("for-text")) ||
        (type === "resource" && field.classList.contains("for-resource")) ||
        ((type === "image" || type === "audio") && field.classList.contains("for-media"));
      field.hidden = !wanted;
    });
  }

  function showAll(root) {
    root.querySelectorAll("fieldset.message-edit").forEach(showFieldsOf);
  }

  document.addEventListener("DOMContentLoaded", function () { showAll(document); });
  // Messages swapped in by a row button (htmx) are drawn with every field: show theirs.
  document.addEventListener("htmx:load", function (event) {
    if (event.target && event.target.querySelectorAll) { showAll(event.target); }
  });
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.matches && target.matches("fieldset.message-edit select.content-type")) {
      showFieldsOf(target.closest("fieldset.message-edit"));
    }
  });
})();

// The resource editor: only the chosen kind's fields (and, for static content, the text or the
// file), and live checks that leave the file out. A check posts the whole form on every pause in
// typing; the file (or the base64 blob carried in a hidden field after an upload) can be megabytes,
// so checks send its size instead ("blob_chars"), which only the check reads. Saving and the
// buttons post the real thing.
(function () {
  "use strict";

  function showResourceFields(form) {
    var select = form.querySelector("select.resource-kind");
    if (!select) { return; }
    var kind = select.value;
    var picked = form.querySelector('input[name="source"]:checked');
    var source = picked ? picked.value : "text";
    form.querySelectorAll("[data-kinds]").forEach(function (element) {
      var wanted = element.getAttribute("data-kinds").split(" ").indexOf(kind) >= 0;
      var only = element.getAttribute("data-source");
      if (wanted && only && kind === "static") { wanted = only === source; }
      element.hidden = !wanted;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("editor");
    if (!form || !form.querySelector("select.resource-kind")) { return; }
    showResourceFields(form);
    form.addEventListener("change", function (event) {
      var target = event.target;
      if (target.name === "upload" && target.files && target.files.length) {
        var file = form.querySelector('input[name="source"][value="file"]');
        if (file) { file.checked = true; }
      }
      if (target.name === "kind" || target.name === "source" || target.name === "upload") {
        showResourceFields(form);
      }
    });
  });

  document.addEventListener("htmx:configRequest", function (event) {
    var detail = event.detail;
    var form = detail.elt && detail.elt.closest ? detail.elt.closest("form") : null;
    if (!form || !form.querySelector("select.resource-kind") || !detail.formData) { return; }
    if (!/\/-\/check$/.test(detail.path)) { return; }
    // htmx adds the last clicked (or focused) submit button to the form's own posts: a check
    // made while "Fetch now" has focus must not fetch again. Only that button's request fetches.
    if (detail.elt === form) { detail.formData.delete("op"); }
    var held = form.querySelector('input[type="hidden"][name="blob"]');
    var upload = form.querySelector('input[type="file"][name="upload"]');
    var chars = held ? held.value.length : null;
    if (upload && upload.files && upload.files.length) {
      chars = 4 * Math.ceil(upload.files[0].size / 3);
      detail.formData.set("upload_type", upload.files[0].type || "");
    }
    detail.formData.delete("blob");
    detail.formData.delete("blob_name");
    detail.formData.delete("upload");
    if (chars !== null) { detail.formData.set("blob_chars", String(chars)); }
  });

  // "Fetch now" has its own request (a check that fetches). The form's own checks would replace its
  // answer: while it runs they wait, and afterwards a check still pending from before the fetch
  // (the field left for the button fires "change"; typing schedules one half a second later) is
  // dropped, since nothing changed since the fetch was asked. The next edit checks again.
  var fetching = false;
  var fetchAsked = 0;
  var lastEdit = 0;
  function edited(event) {
    if (event.target && event.target.id !== "fetch-now") { lastEdit = Date.now(); }
  }
  document.addEventListener("input", edited, true);
  document.addEventListener("change", edited, true);
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.id === "fetch-now") {
      fetching = true;
      fetchAsked = Date.now();
      var form = elt.closest("form");
      if (form && window.htmx) { window.htmx.trigger(form, "htmx:abort"); }
    } else if (elt && elt.id === "editor" && (fetching || (fetchAsked && lastEdit < fetchAsked))) {
      event.preventDefault();
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.elt && event.detail.elt.id === "fetch-now") { fetching = false; }
  });
})();

// Tool editor: the new-secret field shows only while "Replace the secret" (or "Set a secret") is
// chosen, and what was typed in it is dropped when another choice is made. Without this file the
// field is always shown and is used only with that choice.
(function () {
  "use strict";

  function syncSecret(fieldset) {
    var chosen = fieldset.querySelector('input[name="secret_action"]:checked');
    var replacing = !!chosen && chosen.value === "replace";
    var field = fieldset.querySelector(".secret-new");
    if (!field) { return; }
    field.hidden = !replacing;
    if (!replacing) {
      var input = field.querySelector('input[name="secret_new"]');
      if (input) { input.value = ""; }
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("fieldset.secret-edit").forEach(function (fieldset) {
      syncSecret(fieldset);
      fieldset.addEventListener("change", function (event) {
        if (event.target.name === "secret_action") { syncSecret(fieldset); }
      });
    });
  });
})();

// Row buttons (add or remove an argument, a message, a header) in place. Each row container
// ([data-rows], with an id) carries hx-target/hx-select/hx-swap and its buttons hx-post the form to
// its own address, as the no-JavaScript post-back does: the server renders the rows (one renderer,
// numbers as it reads them) and htmx swaps just that container. Here: where the focus goes after
// the swap (the new row's first field; after a removal the previous row, else the next, else the
// add button), and an `input` event from the new rows so that the live check and anything else
// following the form's edits hears of the change.
(function () {
  "use strict";

  var pending = null;

  function firstField(row) {
    var fields = row.querySelectorAll("input:not([type=hidden]), select, textarea, [contenteditable=true]");
    for (var i = 0; i < fields.length; i++) {
      if (!fields[i].disabled && !fields[i].closest("[hidden]") && fields[i].getClientRects().length) {
        return fields[i];
      }
    }
    return null;
  }

  function rowOf(container, index) {
    var rows = container.querySelectorAll("[data-row]");
    var found = null;
    rows.forEach(function (row) {
      if (row.closest("[data-rows]") === container && row.getAttribute("data-row") === String(index)) { found = row; }
    });
    return found;
  }

  function rowCount(container) {
    var count = 0;
    container.querySelectorAll("[data-row]").forEach(function (row) {
      if (row.closest("[data-rows]") === container) { count++; }
    });
    return count;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var button = event.detail.elt;
    if (!button || button.tagName !== "BUTTON" || button.name !== "op") { return; }
    var container = button.closest("[data-rows]");
    if (!container || !container.id) { return; }
    var removed = /^remove-[a-z]+-(\d+)$/.exec(button.value);
    pending = { id: container.id, removed: removed ? parseInt(removed[1], 10) : null };
  });

  document.addEventListener("htmx:afterSettle", function () {
    if (!pending) { return; }
    var done = pending;
    pending = null;
    var container = document.getElementById(done.id);
    if (!container) { return; }
    var count = rowCount(container);
    var row = null;
    if (done.removed === null) {
      row = rowOf(container, count - 1);
    } else if (done.removed > 0) {
      row = rowOf(container, done.removed - 1);
    } else {
      row = rowOf(container, 0);
    }
    var target = row ? firstField(row) : null;
    if (!target) { target = container.querySelector("[data-add-row]"); }
    if (target) { target.focus(); }
    container.dispatchEvent(new Event("input", { bubbles: true }));
  });
})();
