import HTTPTypes

/// The header names the edge spells out that HTTPTypes has no constant for.
///
/// `HTTPField.Name`'s initializer is failable (a name must be a token). These are tokens, so it
/// never fails for them (`HeaderNameTests` checks each); a name that did would read as no header
/// and be written as `X-Herald-Invalid-Name`, never trap on a request (swift-format's
/// NeverForceUnwrap holds in Sources/).
extension HTTPField.Name {
    static let requestID = named("X-Request-Id")
    static let trackingID = named("TrackingId")
    static let correlationID = named("x-ms-correlation-request-id")
    static let continuationToken = named("x-ms-continuationtoken")
    static let nhFormat = named("ServiceBusNotification-Format")
    static let nhTags = named("ServiceBusNotification-Tags")
    static let nhScheduleTime = named("ServiceBusNotification-ScheduleTime")
    static let nhDeviceHandle = named("ServiceBusNotification-DeviceHandle")
    static let webPushP256DH = named("P256DH")
    static let webPushAuth = named("Auth")
    static let contentTypeOptions = named("X-Content-Type-Options")
    static let referrerPolicy = named("Referrer-Policy")
    static let frameOptions = named("X-Frame-Options")
    static let forwarded = named("Forwarded")
    static let xForwardedFor = named("X-Forwarded-For")
    static let traceParent = named("traceparent")
    static let traceState = named("tracestate")

    /// Every name above, for the test that checks them.
    static let heraldNamed: [HTTPField.Name] = [
        requestID, trackingID, correlationID, continuationToken, nhFormat, nhTags, nhScheduleTime, nhDeviceHandle,
        webPushP256DH, webPushAuth, contentTypeOptions, referrerPolicy, frameOptions, forwarded, xForwardedFor,
        traceParent, traceState,
    ]

    static let invalidName = "X-Herald-Invalid-Name"

    /// `name` as a field name; ``invalidName`` when it is not a token.
    static func named(_ name: String) -> HTTPField.Name {
        if let field = HTTPField.Name(name) { return field }
        if let field = HTTPField.Name(invalidName) { return field }
        return .via  // unreachable: invalidName is a token
    }
}

extension HTTPFields {
    /// `self[name]`, read without HTTPTypes' join when the name has one field (as every header the
    /// edge reads normally comes). The subscript joins a name's values through a lazy map whose
    /// generic metadata is looked up on each call: ~4k instructions a read, 7k of each tutorial
    /// PUT's (callgrind, `herald-bench instructions`). Several fields of the name go through the
    /// subscript, joined as it joins them.
    func value(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            guard found == nil else { return self[name] }
            found = field.value
        }
        return found
    }
}
