import HeraldModel

/// The status code of the ``ServiceError`` `call` throws: nil when it succeeds, UNKNOWN for an
/// error of another kind. For tables of RPC calls and the status each must answer.
public func statusCode(_ call: () async throws -> some Any) async -> StatusCode? {
    do {
        _ = try await call()
        return nil
    } catch let error as ServiceError {
        return error.code
    } catch {
        return .unknown
    }
}
