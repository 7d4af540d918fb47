/** What a conversion refuses: a source, profile, predictor file or option it cannot make a store of. */
export class ConvertError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConvertError";
  }
}
