public import HeraldProto

extension FailureClass {
    /// The class of a failure reason as herald-dispatch stores it: a push service's own code
    /// (APNs' `reason`, FCM v1's `status`), `HTTP <status>` when the service gave none (WNS, Web
    /// Push, or a bare answer), or one of Herald's ("NoCredentials", "Abandoned").
    ///
    /// Dispatch classifies because it owns the senders that write these spellings; callers read
    /// the class (the edge's NH outcomes name it as NH does).
    public init(reason: String) {
        self =
            switch reason {
            case "Abandoned": .abandoned
            case "NoCredentials", "InvalidProviderToken", "ExpiredProviderToken", "MissingProviderToken",
                "BadCertificate", "THIRD_PARTY_AUTH_ERROR", "HTTP 401", "HTTP 403":
                .invalidCredentials
            case "Unregistered", "UNREGISTERED", "ExpiredToken", "HTTP 404", "HTTP 410": .expiredChannel
            case "BadDeviceToken", "DeviceTokenNotForTopic", "INVALID_ARGUMENT", "SENDER_ID_MISMATCH", "BadTopic":
                .wrongToken
            case "PayloadTooLarge", "HTTP 413": .payloadTooLarge
            case "TooManyRequests", "QUOTA_EXCEEDED", "HTTP 429": .throttled
            case "InternalServerError", "ServiceUnavailable", "Shutdown", "UNAVAILABLE", "INTERNAL": .providerError
            default: reason.hasPrefix("HTTP 5") ? .providerError : .unknown
            }
    }

    /// The class of a delivery's last failure: unspecified unless it failed or was abandoned.
    public init(state: DeliveryState, reason: String) {
        switch state {
        case .failed: self.init(reason: reason)
        case .abandoned: self = .abandoned
        default: self = .unspecified
        }
    }
}

extension FailureCount {
    /// `count` failures for `reason`, with its class.
    package init(classifying reason: String, count: Int64) {
        self.init(reason: reason, count: count, failureClass: FailureClass(reason: reason))
    }
}
