"""Model families, one folder each (no __init__.py needed): a family's model, its
objective(s) and its HF adapter live in `families/<name>/` and register themselves at
import. The registries (models.FAMILIES, objectives.OBJECTIVES, interop.hf.ADAPTERS,
interop.FORMATS) import every module here on their first lookup; nothing outside this
package names a family."""
