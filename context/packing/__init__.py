"""Token accounting (exact counts of line ranges as sums of per-line counts) and the packing of the
sources' candidates into the budget, in priority order."""
