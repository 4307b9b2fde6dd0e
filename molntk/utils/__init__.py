"""Small helpers shared by several modules (atomic files, checksums)."""
