import Foundation

/// Writes one JSON document of everything Herald holds about one person (`herald users export`),
/// piece by piece as each service pages it out, so a person with 100,000 devices takes one page of
/// memory, not the whole document:
///
/// ```
/// {"user": …, "hub": … or null, "exportedAt": …,
///  "account": {"account": …, "liveTokens": n, "grants": […]} (account exports only),
///  "devices": [registration's ExportUserDevices items…],
///  "deliveries": [dispatch's ExportDeviceRecords items: delivery records to those devices…],
///  "inbox": [dispatch's ExportDeviceRecords items: inbox entries of those devices…],
///  "content": [payload's ExportUser items…] (account exports only),
///  "sends": [dispatch's ExportUser items…]}
/// ```
///
/// Each item is the JSON object the owning service wrote (see each ExportUser in proto/).
public enum UserExport {
    /// How many items of each kind were written.
    public struct Counts: Sendable, Equatable {
        public var devices = 0
        public var deliveries = 0
        public var inbox = 0
        public var content = 0
        public var sends = 0
    }

    public static func run(
        user: String, hub: String?, auth: any AuthServiceClientProtocol,
        registration: any RegistrationServiceClientProtocol,
        payload: any PayloadServiceClientProtocol, dispatch: any DispatchServiceClientProtocol, pageSize: Int32 = 500,
        requestID: String? = nil, write: ([UInt8]) throws -> Void
    ) async throws -> Counts {
        var counts = Counts()
        let scope = ExportUserRequest(user: user, hub: hub ?? "", limit: pageSize)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        func string(_ text: String?) throws -> [UInt8] { Array(try encoder.encode(text)) }
        let now = ISO8601DateFormatter().string(from: Date())
        try write(
            Array(#"{"user":"#.utf8) + string(user) + Array(#","hub":"#.utf8) + string(hub)
                + Array(#","exportedAt":"#.utf8) + string(now))
        if hub == nil {
            let account = try await auth.exportUser(scope, requestID: requestID).items.first ?? Array("null".utf8)
            try write(Array(#","account":"#.utf8) + account)
        }
        counts.devices = try await list("devices", write) { after in
            var request = scope
            request.after = after
            return try await registration.exportUserDevices(request, requestID: requestID)
        }
        for kind in [ExportDeviceRecordsRequest.Kind.deliveries, .inbox] {
            let name = kind == .inbox ? "inbox" : "deliveries"
            // Dispatch knows deliveries by registration id: the devices again, as many pages as
            // make up `ExportLimits.devicesPerCall` (each call scans dispatch's records once), each such
            // group's records paged in turn.
            var devices = ListUserDevicesRequest(user: user, hub: scope.hub, limit: pageSize)
            var count = 0
            try write(Array(",\"\(name)\":[".utf8))
            var listed = false
            while !listed {
                var group: [UserDevice] = []
                while group.isEmpty || group.count + Int(pageSize) <= ExportLimits.devicesPerCall {
                    let page = try await registration.listUserDevices(devices, requestID: requestID).devices
                    guard let last = page.last else {
                        listed = true
                        break
                    }
                    guard last.registrationID > devices.after else {
                        throw ServiceError(.internal, "the device list did not move past \(devices.after)")
                    }
                    devices.after = last.registrationID
                    // Dispatch reads only the registration id.
                    group += page.map { UserDevice(registrationID: $0.registrationID) }
                }
                guard !group.isEmpty else { break }
                try await items(name, write, count: &count) { after in
                    try await dispatch.exportDeviceRecords(
                        ExportDeviceRecordsRequest(kind: kind, devices: group, after: after, limit: pageSize),
                        requestID: requestID)
                }
            }
            try write(Array("]".utf8))
            if kind == .inbox { counts.inbox = count } else { counts.deliveries = count }
        }
        if hub == nil {
            counts.content = try await list("content", write) { after in
                var request = scope
                request.after = after
                return try await payload.exportUser(request, requestID: requestID)
            }
        }
        counts.sends = try await list("sends", write) { after in
            var request = scope
            request.after = after
            return try await dispatch.exportUser(request, requestID: requestID)
        }
        try write(Array("}\n".utf8))
        return counts
    }

    /// `,"name":[` the items of every page `page` gives, `]`; how many.
    private static func list(
        _ name: String, _ write: ([UInt8]) throws -> Void, page: (String) async throws -> ExportPage
    ) async throws -> Int {
        try write(Array(",\"\(name)\":[".utf8))
        var count = 0
        try await items(name, write, count: &count, page: page)
        try write(Array("]".utf8))
        return count
    }

    /// The items of every page `page` gives, each after a comma unless it is the list's first.
    private static func items(
        _ name: String, _ write: ([UInt8]) throws -> Void, count: inout Int, page: (String) async throws -> ExportPage
    ) async throws {
        var after = ""
        repeat {
            let next = try await page(after)
            for item in next.items {
                try write(count == 0 ? item : [UInt8(ascii: ",")] + item)
                count += 1
            }
            // A cursor that does not move would loop for ever: a service's bug, refused here.
            guard next.next.isEmpty || next.next != after else {
                throw ServiceError(.internal, "the \(name) export did not move past \(after)")
            }
            after = next.next
        } while !after.isEmpty
    }
}
