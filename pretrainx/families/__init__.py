"""Model families, one folder each (no __init__.py needed): a family's model, its
objective(s), its HF adapter and its `spec.py` live in `families/<name>/`. The spec
holds the run's defaults and checks and registers the family's one `registry.Family`
entry; the first lookup imports every `families/*/spec.py`. Nothing outside this
package names a family."""
