// The /docs page: Swagger UI (served by the gateway itself, as the fastapi-offline package ships it) showing
// /openapi.json. No validator badge: it would call a service elsewhere.
"use strict";

window.addEventListener("DOMContentLoaded", () => {
  const page = /** @type {any} */ (window); // swagger-ui-bundle.js, loaded before this script, defines the bundle
  page.ui = page.SwaggerUIBundle({
    url: new URL("openapi.json", document.baseURI).href,
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: false,
  });
});
