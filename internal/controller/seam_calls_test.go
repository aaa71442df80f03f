package controller

import (
	"go/ast"
	"go/types"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestProvidersAreAskedInOneFile: the controllers call a sandbox
// provider's methods (the seam's Provider and its one optional Preparer)
// only in sandbox.go, through the call's runner and the seam's checks, so
// that what a provider is asked, and when, is read in one place. Found by
// the type checker, not by name: any method declared by package sandbox.
//
// Within sandbox.go, a call's work (run, prepare, where, recorded,
// discard) is asked only by the call's runner (callRunner's methods), and
// Release only by releaseCall, the seam's lifecycle for a call settled
// without its pipeline. Outside it, the reconcilers tell the runner one
// thing, that a write is durable (durable): when a settled attempt's work
// ends is the runner's decision, read from the durable status.
func TestProvidersAreAskedInOneFile(t *testing.T) {
	const seam = "github.com/toolgate/toolgate/internal/providers/sandbox"
	work := []string{"Run", "Prepare", "Where", "Recorded", "Discard"}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
	pkgs, err := packages.Load(cfg, "github.com/toolgate/toolgate/internal/controller")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 {
		t.Fatal("the controller package does not load")
	}
	calls, told := 0, 0
	for _, pkg := range pkgs {
		for _, file := range pkg.Syntax {
			name := filepath.Base(pkg.Fset.Position(file.Pos()).Filename)
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				inRunner := fn.Recv != nil && receiverName(fn) == "callRunner"
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					s := pkg.TypesInfo.Selections[sel]
					if s == nil || s.Obj().Pkg() == nil {
						return true
					}
					at := pkg.Fset.Position(sel.Pos())
					if named := receiverType(s); named == "callRunner" && !inRunner {
						told++
						if sel.Sel.Name != "durable" {
							t.Errorf("%s asks the call's runner %s at %s: a reconciler only tells it a write is durable", fn.Name.Name, sel.Sel.Name, at)
						}
						return true
					}
					if s.Obj().Pkg().Path() != seam {
						return true
					}
					calls++
					switch {
					case name != "sandbox.go":
						t.Errorf("%s calls the sandbox provider's %s at %s: ask it in sandbox.go", name, sel.Sel.Name, at)
					case slices.Contains(work, sel.Sel.Name) && !inRunner:
						t.Errorf("%s asks a provider for a call's work (%s) at %s: only the call's runner does", fn.Name.Name, sel.Sel.Name, at)
					case sel.Sel.Name == "Release" && fn.Name.Name != "releaseCall":
						t.Errorf("%s releases a call at %s: only releaseCall does", fn.Name.Name, at)
					}
					return true
				})
			}
		}
	}
	if calls < 8 || told == 0 {
		t.Errorf("only %d calls of a provider's methods and %d of the runner's found: the check no longer sees them", calls, told)
	}
}

// receiverName is the name of fn's receiver type.
func receiverName(fn *ast.FuncDecl) string {
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// receiverType is the name of the named type whose method s selects ("" for
// a field or a method of an unnamed type).
func receiverType(s *types.Selection) string {
	if s.Kind() != types.MethodVal {
		return ""
	}
	recv := s.Recv()
	if p, ok := recv.(*types.Pointer); ok {
		recv = p.Elem()
	}
	if n, ok := recv.(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}
