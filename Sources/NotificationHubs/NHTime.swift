import Foundation
import HeraldModel

/// The times NH's clients send (`ServiceBusNotification-ScheduleTime`,
/// `ServiceBusNotification-Apns-Expiry`), read leniently (docs/notification-hubs.md lists them):
/// .NET and Java `2024-01-01T08:00:00` (no zone: UTC), JS `2024-01-01T08:00:00.000Z`, Python
/// `isoformat()` with `+00:00`, the Python sample's `2024-01-01'T'08:00:00`, quoted, the W3C
/// profile of NH's docs without seconds (`1997-07-16T19:20+01:00`), and the .NET SDK's
/// invariant-culture Apns-Expiry `11/24/2026 20:28:00` (UTC).
public enum NHTime {
    public static func parse(_ text: String) -> Date? {
        var value = text.trimmingCharacters(in: .whitespaces)
        if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
            value = String(value.dropFirst().dropLast())
        }
        value = value.replacingOccurrences(of: "'T'", with: "T")
        var components = DateComponents()
        components.calendar = Calendar(identifier: .gregorian)
        components.timeZone = TimeZone(secondsFromGMT: 0)
        // .NET's `DateTime.ToString(CultureInfo.InvariantCulture)`, which its SDK sends as
        // ServiceBusNotification-Apns-Expiry: month/day/year, 24-hour time, no zone (UTC).
        if let match = value.wholeMatch(of: /(\d{1,2})\/(\d{1,2})\/(\d{4}) (\d{1,2}):(\d{2}):(\d{2})/) {
            components.year = Int(match.3)
            components.month = Int(match.1)
            components.day = Int(match.2)
            components.hour = Int(match.4)
            components.minute = Int(match.5)
            components.second = Int(match.6)
            guard components.isValidDate, let date = components.date else { return nil }
            return date
        }
        // ISO 8601 and the W3C profile NH's docs show (seconds optional: `1997-07-16T19:20+01:00`).
        guard
            let match = value.wholeMatch(
                of: /(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?(Z|z|[+-]\d{2}:?\d{2})?/)
        else { return nil }
        components.year = Int(match.1)
        components.month = Int(match.2)
        components.day = Int(match.3)
        components.hour = Int(match.4)
        components.minute = Int(match.5)
        components.second = match.6.flatMap { Int($0) } ?? 0
        guard components.isValidDate, let base = components.date else { return nil }
        var date = base
        if let fraction = match.7, let seconds = Double("0" + fraction) { date += seconds }
        if let zone = match.8, zone != "Z", zone != "z" {
            let digits = zone.dropFirst().filter(\.isNumber)
            guard let hours = Int(digits.prefix(2)), let minutes = Int(digits.suffix(2)), hours < 24, minutes < 60
            else { return nil }
            let offset = TimeInterval(hours * 3600 + minutes * 60)
            date -= zone.first == "-" ? -offset : offset
        }
        return date
    }
}

/// NH's inference of `apns-push-type` when a send names none: `background` when
/// `content-available` is the payload's only content, else `alert`.
public enum APNsPushType {
    public static func inferred(_ body: [UInt8]) -> String {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let aps = object["aps"] as? [String: Any]
        else { return "alert" }
        let visible = aps["alert"] != nil || aps["badge"] != nil || aps["sound"] != nil
        return (aps["content-available"] as? Int) == 1 && !visible ? "background" : "alert"
    }
}
