// Starts Swagger UI on /docs from the vendored bundle (an external file, so the page needs no inline script).
window.addEventListener("DOMContentLoaded", function () {
  window.ui = SwaggerUIBundle({
    url: document.body.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: true,
    layout: "BaseLayout",
    presets: [SwaggerUIBundle.presets.apis],
  });
});
