// Starts ReDoc on /redoc from the vendored standalone bundle.
window.addEventListener("DOMContentLoaded", function () {
  Redoc.init(document.body.dataset.openapiUrl, {}, document.getElementById("redoc-container"));
});
