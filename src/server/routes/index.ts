/** The routes beside the completions and models, by path (without the /v1 prefix, which they also answer under). */
import { metricsRoute } from "./metrics.js";
import { propsRoute } from "./props.js";
import type { Route } from "./route.js";
import { detokenizeRoute, tokenizeRoute } from "./tokenize.js";

export const EXTRA_ROUTES: ReadonlyMap<string, Route> = new Map([
  ["/tokenize", tokenizeRoute],
  ["/detokenize", detokenizeRoute],
  ["/props", propsRoute],
  ["/metrics", metricsRoute],
]);

export type { Route, RouteAnswer, RouteContext } from "./route.js";
