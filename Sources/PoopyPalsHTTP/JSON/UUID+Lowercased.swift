import Foundation
import PoopyPalsData
import Values

extension UUID {
    /// The canonical lower-case form the API uses.
    var lowercased: String { UUIDText.lowercase(self) }
}
