"""The result store: entries on disk, their keys (code from the import graph, versions), fingerprints, atomic writes.
May import: errors only, so that every stage can use it."""
