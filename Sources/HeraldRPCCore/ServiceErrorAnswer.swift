public import HeraldModel

extension ServiceError {
    /// What a handler's error answers the caller, for every transport: unexpected errors are logged
    /// here with their detail and reach the caller only as INTERNAL "internal error".
    public static func answering(_ error: any Error, in context: RPCContext) -> ServiceError {
        let (serviceError, expected) = from(error)
        if serviceError.isStorageFull {
            context.logger.warning("write refused: the disk is full", metadata: ["herald.error": "\(error)"])
        } else if expected {
            context.logger.debug("rpc failed", metadata: ["herald.status": "\(serviceError.code)"])
        } else {
            context.logger.error("rpc failed unexpectedly", metadata: ["herald.error": "\(String(reflecting: error))"])
        }
        return serviceError
    }

    /// The status an arbitrary error thrown by a handler turns into, and whether it was expected.
    /// Unexpected errors become INTERNAL with a generic message; the caller logs the detail.
    public static func from(_ error: any Error) -> (error: ServiceError, expected: Bool) {
        switch error {
        case let e as ServiceError: (e, true)
        case is CancellationError: (.init(.cancelled, "call cancelled"), true)
        case let e as any ServiceErrorConvertible:
            if let known = e.serviceError { (known, true) } else { (.init(.internal, "internal error"), false) }
        default: (.init(.internal, "internal error"), false)
        }
    }
}
