"""mcp-registry: a versioned prompt, resource and tool registry that is itself an MCP server."""

__version__ = "0.1.0"
