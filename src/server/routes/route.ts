/**
 * What a route beside the completions needs from the server, and what it answers: the server
 * checks the method, readiness and API key, calls `handle`, and sends the answer (a JSON body, or
 * text for /metrics).
 */
import type { ChatModel } from "../../chat/completions.js";
import type { ChatTemplate } from "../../chat/template.js";
import type { GenerateOptions } from "../../generate/generator.js";
import type { ServerMetrics } from "../server.js";

export interface RouteContext {
  model: ChatModel;
  modelName: string;
  /** the model file, when the server was told it */
  modelPath: string | undefined;
  template: ChatTemplate | undefined;
  defaults: GenerateOptions | undefined;
  metrics: Readonly<ServerMetrics>;
  /** requests waiting for the model behind the one generating */
  waiting: number;
  /** the request body as JSON (400 when it does not parse, 413 when too large) */
  readBody(): Promise<unknown>;
}

export type RouteAnswer = { json: unknown } | { text: string; contentType: string };

export interface Route {
  method: "GET" | "POST";
  handle(ctx: RouteContext): Promise<RouteAnswer> | RouteAnswer;
}
