// Package archtest holds the module's architecture tests, and nothing
// else: importrules_test.go checks the packages' layering (issue 22: the
// pure step package, one leaf Kafka package, the heads below the loop
// shell) with go list over the whole module, run from its root. A new
// rule is a new row of its importRules. It lives under stage, whose
// layering most of the rules guard (the top level of the module is fixed:
// ../shared/DESIGN.md); no package imports it.
package archtest
