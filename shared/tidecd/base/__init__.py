"""The bottom layer, imported by every other: model types, constants, errors, limits and small pure helpers."""
