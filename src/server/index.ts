/** The OpenAI-compatible HTTP server. */
export { OpenAIServer, startServer, type ServerOptions, type ServerState, type ServerMetrics } from "./server.js";
