// ESLint over the dashboard's own scripts (make js-lint). They are classic scripts, not
// modules: each is an IIFE that hangs its part on window.BS; Plotly and htmx are vendored
// under static/vendor and loaded as globals (static/vendor is not ours and is not linted).
"use strict";

const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  { ignores: ["static/vendor/**", "node_modules/**", "build/**", "data/**", ".venv*/**"] },
  {
    files: ["static/js/**/*.js"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      globals: { ...globals.browser, Plotly: "readonly", htmx: "readonly" },
    },
    rules: {
      ...js.configs.recommended.rules,
      "no-undef": "error",
      "no-unused-vars": ["error", { args: "after-used", caughtErrors: "none" }],
    },
  },
  {
    files: ["eslint.config.js"],
    languageOptions: { sourceType: "commonjs", globals: { ...globals.node } },
  },
];
