public import HeraldModel

/// What `test-mode` unlocks: each service's ResetForTests, and the edge's `/v1/test/*` routes.
///
/// A deployment that did not opt in answers FAILED_PRECONDITION naming the setting, so a stray
/// call (or a test pointed at the wrong stack) can never wipe production data.
public enum TestMode {
    /// Throws FAILED_PRECONDITION unless `enabled`.
    public static func require(_ enabled: Bool, service: ServiceName) throws {
        guard enabled else {
            throw ServiceError.failedPrecondition(
                "ResetForTests needs herald-\(service.rawValue) to run with test-mode on (HERALD_TEST_MODE=true); it is off"
            )
        }
    }
}
