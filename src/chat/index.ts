/** Chat templates, chat sessions and the in-process OpenAI-shaped facade. */
export { ApiError, ModelBusyError, ModelDisposedError, PromptTooLongError, type ApiErrorType } from "./errors.js";
export {
  ChatTemplate,
  templateForModel,
  tokenizeChatPrompt,
  type ChatMessage,
  type ChatRole,
  type RenderOptions,
  type TemplateKwargs,
  type TemplateTokens,
} from "./template.js";
export { GenerationQueue, queueFor } from "./queue.js";
export {
  createChatCompletion,
  createCompletion,
  prepareChatCompletion,
  prepareCompletion,
  generateInTurn,
  PreparedCompletion,
  type ChatModel,
  type CompletionOptions,
} from "./completions.js";
export { ChatSession, type ChatSessionOptions, type ChatPromptOptions, type ChatReply } from "./session.js";
export { parseChatRequest, parseCompletionRequest, MAX_STOP_STRINGS } from "./params.js";
export type * from "./openai-types.js";
