"""The MCP protocol layer: message models, dispatcher, handlers, sessions, transports."""
