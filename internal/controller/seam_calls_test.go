package controller

import (
	"go/ast"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestProvidersAreAskedInOneFile: the controllers call a sandbox
// provider's methods (the seam's Provider and its one optional Preparer)
// only in sandbox.go, through the call's runner and the seam's checks, so
// that what a provider is asked, and when, is read in one place. Found by
// the type checker, not by name: any method declared by package sandbox.
func TestProvidersAreAskedInOneFile(t *testing.T) {
	const seam = "github.com/toolgate/toolgate/internal/providers/sandbox"
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, "github.com/toolgate/toolgate/internal/controller")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("the controller package does not load")
	}
	calls := 0
	for _, pkg := range pkgs {
		for _, file := range pkg.Syntax {
			name := filepath.Base(pkg.Fset.Position(file.Pos()).Filename)
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s := pkg.TypesInfo.Selections[sel]
				if s == nil || s.Obj().Pkg() == nil || s.Obj().Pkg().Path() != seam {
					return true
				}
				calls++
				if name != "sandbox.go" {
					t.Errorf("%s calls the sandbox provider's %s at %s: ask it in sandbox.go", name, sel.Sel.Name, pkg.Fset.Position(sel.Pos()))
				}
				return true
			})
		}
	}
	if calls < 8 {
		t.Errorf("only %d calls of a provider's methods found: the check no longer sees them", calls)
	}
}
