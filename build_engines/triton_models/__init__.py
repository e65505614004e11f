"""model.py templates copied into the Triton model repository (run inside Triton, not imported here)."""
