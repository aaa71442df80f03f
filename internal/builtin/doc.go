// Package builtin implements toolgate's built-in workspace tools (fs.read,
// fs.write, fs.list, fs.edit). Every path is resolved through os.Root opened
// at the workspace root, so "..", absolute paths and symlinks cannot reach
// outside it; an escape is a sandbox_denied failure. Writes are refused in a
// read-only workspace.
package builtin
