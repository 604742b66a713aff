// The library's errors: one per thing that can go wrong, each with a code to branch on.
//
//   RpcError         the daemon answered a request with an error (`code`: a JSON-RPC code,
//                    see `ErrorCode`)
//   ConnectionError  no socket, a refused handshake, or a socket that closed (`code`: a
//                    string such as ECONNREFUSED, UNAUTHORIZED, FORBIDDEN, CLOSED)
//   DiscoveryError   no daemon could be found or started (`code`: NOT_RUNNING, UNAVAILABLE,
//                    INVALID, NO_PYTHON)

/** A JSON-RPC error response. */
export class RpcError extends Error {
  override name = "RpcError";
  constructor(
    readonly code: number,
    /** The daemon's own words, without the method and code. */
    readonly rpcMessage: string,
    readonly data?: unknown,
    readonly method?: string,
  ) {
    super(`${method ? `${method}: ` : ""}${rpcMessage} (code ${code})`);
  }
}

/** An error with a string `code` to branch on. */
class CodedError extends Error {
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export class ConnectionError extends CodedError {
  override name = "ConnectionError";
}

export class DiscoveryError extends CodedError {
  override name = "DiscoveryError";
}
