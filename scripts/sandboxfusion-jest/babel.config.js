// Test files are TypeScript or modern JavaScript: Babel strips the types and
// compiles for the node that runs them.
module.exports = {
  presets: [["@babel/preset-env", { targets: { node: "current" } }], "@babel/preset-typescript"],
};
