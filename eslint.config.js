// ESLint over the dashboard's own scripts (make js-lint). They are ES modules: each file
// imports what it uses and exports what others use; nothing hangs on window. Plotly and
// htmx are vendored classic scripts under static/vendor (not ours, not linted) and are
// the only globals. The module graph rule (tools/eslint_module_graph.js) resolves every
// import to a file and a named export and fails on an import cycle.
"use strict";

const js = require("@eslint/js");
const globals = require("globals");
const moduleGraph = require("./tools/eslint_module_graph.js");

// Browser globals whose names our modules use for their own things: a missing import or
// declaration of one would pass no-undef and fail at run time (window.model, .name, ...).
const CONFUSABLE = ["model", "name", "status", "event", "length", "parent", "top", "origin",
  "self", "open", "close", "closed", "stop", "find", "print", "scroll", "focus", "blur"];

module.exports = [
  { ignores: ["static/vendor/**", "node_modules/**", "build/**", "data/**", ".venv*/**"] },
  {
    files: ["static/js/**/*.js"],
    ...js.configs.recommended,
    plugins: { bs: moduleGraph },
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.browser, Plotly: "readonly", htmx: "readonly" },
    },
    rules: {
      ...js.configs.recommended.rules,
      "no-undef": "error",
      "no-unused-vars": ["error", { args: "after-used", caughtErrors: "none" }],
      "no-shadow": ["error", { builtinGlobals: false }],
      "no-restricted-globals": ["error", ...CONFUSABLE],
      "bs/module-graph": "error",
    },
  },
  {
    files: ["eslint.config.js", "tools/eslint_module_graph.js"],
    languageOptions: { sourceType: "commonjs", globals: { ...globals.node } },
  },
];
