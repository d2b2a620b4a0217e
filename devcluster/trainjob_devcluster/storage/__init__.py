"""The object store and what a write does to an object: metadata, patches, server-side
apply with managed fields, label and field selectors."""
