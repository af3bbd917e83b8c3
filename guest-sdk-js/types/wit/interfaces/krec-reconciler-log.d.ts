declare module 'krec:reconciler/log@0.1.2' {
  /**
   * Write one log line.
   */
  export function log(level: Level, message: string): void;
  /**
   * Severity of a log line.
   * # Variants
   * 
   * ## `"trace"`
   * 
   * Very detailed tracing.
   * ## `"debug"`
   * 
   * Information useful when debugging a reconciler.
   * ## `"info"`
   * 
   * Normal progress.
   * ## `"warn"`
   * 
   * Something unexpected that the reconciler handled.
   * ## `"error"`
   * 
   * A failure.
   */
  export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
}
