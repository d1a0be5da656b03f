"""Model and tokenizer loading for the embedded backend."""
