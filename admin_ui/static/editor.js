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

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("fieldset.message-edit").forEach(function (message) {
      showFieldsOf(message);
      var select = message.querySelector("select.content-type");
      if (select) { select.addEventListener("change", function () { showFieldsOf(message); }); }
    });
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
