"""What the console's views share: parameters, paging, the cached queue aggregates, charts,
security headers and errors. The views (core/views) stay thin over these."""
