"""Model families, one folder each: a family's model, its objective(s) and its HF
adapter live in `families/<name>/` and register themselves at import. The registries
(models.FAMILIES, objectives.OBJECTIVES, interop.hf.ADAPTERS) import every module here
on their first lookup; nothing outside this package names a family."""
