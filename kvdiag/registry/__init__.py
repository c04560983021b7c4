"""The defect registry: schema, loading, linting, export."""
