"use strict";
/* The explorer's simulator under node, for tests/test_explorer_node.py: the page's three simulator
   scripts (toyrl/explorer/kernels.js, random.js, sim.js), run in that order as the page runs them,
   on the data toyrl.explore.page_data() gives the page, with `window.toyrl` defined as there.

   stdin: one JSON object {data: page_data(), expression: a JavaScript expression whose value is a
   string (as tests/explorer_cases.result_expression writes it)}. stdout: that string. An exception
   prints {"error": its message, "input_error": whether it is a toyrl.InputError} and exits with 1. */
const fs = require("fs");
const path = require("path");
const vm = require("vm");

const request = JSON.parse(fs.readFileSync(0, "utf8"));
const folder = path.join(__dirname, "..", "toyrl", "explorer");
globalThis.window = globalThis;
globalThis.TOYRL_DATA = request.data;
const source = ["kernels.js", "random.js", "sim.js"].map((file) => fs.readFileSync(path.join(folder, file), "utf8"));
vm.runInThisContext(source.join("\n"), { filename: "simulator.js" });

try {
  const value = vm.runInThisContext(request.expression, { filename: "expression.js" });
  if (typeof value !== "string") throw new TypeError(`the expression must give a string (got ${typeof value})`);
  process.stdout.write(value);
} catch (error) {
  process.stdout.write(JSON.stringify({ error: error.message, input_error: error instanceof window.toyrl.InputError }));
  process.exitCode = 1;
}
