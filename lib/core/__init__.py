"""The bottom: metrics, report types, rate limits, atomic files and cut log text; imports nothing of lib but errors."""
