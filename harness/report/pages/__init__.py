"""The project's comparison pages: records -> rows (model) -> charts and tables (charts, build) -> HTML."""
