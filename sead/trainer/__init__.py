"""Phase 3 and the loop around it: the embedded trainer (torch + transformers, CPU or one GPU, no Ray)."""
