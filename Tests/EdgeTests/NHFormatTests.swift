import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

@testable import Edge

@Suite("Notification Hubs formats", .watchedForStalls)
struct NHFormatTests {

    @Test("an NH send's payload refused by NotificationHubs is the edge's 400; a direct browser send needs its keys")
    func platformHeaders() throws {
        var headers: HTTPFields = [
            HTTPField.Name("ServiceBusNotification-Format")!: "Apple", HTTPField.Name("apns-priority")!: "7",
        ]
        #expect(throws: EdgeError.self) { try NotificationHubsRoutes.nhPayload(headers, body: Data("{}".utf8)) }
        headers = [
            HTTPField.Name("ServiceBusNotification-Format")!: "windows", HTTPField.Name("X-WNS-Type")!: "wns/raw",
            .contentType: "application/octet-stream",
        ]
        #expect(
            try NotificationHubsRoutes.nhPayload(headers, body: Data("raw".utf8)).contentType
                == "application/octet-stream")
        headers = [
            HTTPField.Name("ServiceBusNotification-Format")!: "browser",
            HTTPField.Name("ServiceBusNotification-DeviceHandle")!: "https://e",
        ]
        #expect(throws: EdgeError.self) { try NotificationHubsRoutes.directHandle(headers, platform: .browser) }
        headers[HTTPField.Name("P256DH")!] = "p"
        headers[HTTPField.Name("Auth")!] = "a"
        #expect(
            try NotificationHubsRoutes.directHandle(headers, platform: .browser)
                == #"{"endpoint":"https://e","keys":{"auth":"a","p256dh":"p"}}"#)
    }
}
