// An ESLint plugin with one rule, bs/module-graph, over the dashboard's ES modules
// (static/js): every import is a relative path to a file that exists, every imported
// name is one that file exports, and no module reaches itself through its imports (a
// cycle). Written here because the import plugins are not among the pinned dev tools;
// it parses the imported files with espree, the parser ESLint itself uses.
"use strict";

const fs = require("fs");
const path = require("path");
const espree = require("espree");

const parsed = new Map(); // file -> {mtime, exports: Set, imports: [file]}

/** The exported names and the imported files of `file` (null if it cannot be read). */
function moduleOf(file) {
  let stat;
  try { stat = fs.statSync(file); } catch (e) { return null; }
  const hit = parsed.get(file);
  if (hit && hit.mtime === stat.mtimeMs) return hit;
  let ast;
  try {
    ast = espree.parse(fs.readFileSync(file, "utf8"), { ecmaVersion: 2022, sourceType: "module" });
  } catch (e) {
    return null;
  }
  const exports = new Set();
  const imports = [];
  for (const node of ast.body) {
    if (node.type === "ExportNamedDeclaration") {
      const d = node.declaration;
      if (d && d.declarations) for (const v of d.declarations) exports.add(v.id.name);
      else if (d && d.id) exports.add(d.id.name);
      for (const s of node.specifiers) exports.add(s.exported.name);
    } else if (node.type === "ExportDefaultDeclaration") {
      exports.add("default");
    }
    if (node.type === "ImportDeclaration" || (node.type.startsWith("Export") && node.source)) {
      imports.push(path.resolve(path.dirname(file), node.source.value));
    }
  }
  const mod = { mtime: stat.mtimeMs, exports: exports, imports: imports };
  parsed.set(file, mod);
  return mod;
}

/** A path of imports from `start` back to `target`, or null. */
function cycleFrom(start, target) {
  const seen = new Set();
  const stack = [[start, [start]]];
  while (stack.length) {
    const [file, trail] = stack.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    const mod = moduleOf(file);
    if (!mod) continue;
    for (const next of mod.imports) {
      if (next === target) return trail.concat([next]);
      stack.push([next, trail.concat([next])]);
    }
  }
  return null;
}

const rule = {
  meta: {
    type: "problem",
    docs: { description: "imports resolve to files and named exports; no import cycles" },
    schema: [],
  },
  create(context) {
    const file = path.resolve(context.filename);
    const base = (f) => path.basename(f);
    return {
      ImportDeclaration(node) {
        const spec = node.source.value;
        if (!spec.startsWith("./") || !spec.endsWith(".js")) {
          context.report({ node: node.source, message: `import "${spec}": a relative path to a .js file (./name.js)` });
          return;
        }
        const target = path.resolve(path.dirname(file), spec);
        const mod = moduleOf(target);
        if (!mod) {
          context.report({ node: node.source, message: `import "${spec}": no such module (or it does not parse)` });
          return;
        }
        for (const s of node.specifiers) {
          if (s.type !== "ImportSpecifier") continue;
          if (!mod.exports.has(s.imported.name)) {
            context.report({ node: s, message: `"${s.imported.name}" is not exported by ${spec}` });
          }
        }
        const loop = cycleFrom(target, file);
        if (loop) {
          const trail = [file].concat(loop).map(base).join(" -> ");
          context.report({ node: node.source, message: `import cycle: ${trail}` });
        }
      },
    };
  },
};

module.exports = { meta: { name: "bs-module-graph" }, rules: { "module-graph": rule } };
