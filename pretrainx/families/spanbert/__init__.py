"""SpanBERT (Joshi et al., 2019): BERT's model, masked spans and the span-boundary objective.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
