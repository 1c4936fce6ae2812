"""The oracle as an MCP server for outside clients (plugins spec §20.4)."""
