"""fmha kernel catalogue generator: config tuples -> HIP sources + kernel table."""
