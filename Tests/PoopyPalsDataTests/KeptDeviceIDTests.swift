import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// The service names a request's device by its stored id, kept per instance (sql/0030): a kept id that went stale
/// through another instance (its key now stands for another device, or for none) is found out in the request's own
/// round trip, looked up again, and the request is served as if nothing had been kept.
@Suite("Kept device ids")
struct KeptDeviceIDTests {
    /// Two instances. The first keeps the device's id; through the second the device is erased and its key registered
    /// again, as a new device with a new id. The first instance's next write goes to the new device, and its reads
    /// show the new device's logs, not nothing. Without the check (poopypals_device_is answering true whatever the
    /// id) the write was refused by the shard's policy and the list was empty. A create's kept id is checked by its
    /// insert (issue 57): that insert's 42501 is taken for a stale id (without that, this create failed with 42501).
    @Test func anIdStaleThroughAnotherInstanceIsLookedUpAgain() async throws {
        try await TestDatabase.withMigrated { db in
            let (first, second) = (Database(pool: db.pool(size: 1)), Database(pool: db.pool(size: 1)))
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: first).register(DeviceInfo(model: "old"), as: key)
            let oldID = try #require(first.keptIDs.id(for: key.key))
            _ = try await PoopLogRepository(database: first).create(NewPoopLog(occurredAt: Date(), bristolType: 1), as: key)

            let erased = try await DeviceRepository(database: second).erase(as: key)
            #expect(erased?.logsRemaining == 0)
            #expect(try await DeviceRepository(database: second).register(DeviceInfo(model: "new"), as: key).created)
            let newID = try #require(second.keptIDs.id(for: key.key))
            #expect(newID != oldID)
            #expect(first.keptIDs.id(for: key.key) == oldID)  // stale, and not known to be yet

            let logs = PoopLogRepository(database: first)
            let (log, created) = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 6), as: key)
            #expect(created)
            #expect(first.keptIDs.id(for: key.key) == newID)
            #expect(try await logs.list(as: key).items.map(\.id) == [log.id])
            #expect(try await DeviceRepository(database: first).current(as: key)?.info.model == "new")
            let stored = try await Superuser.column("SELECT device_id::text FROM poop_logs", in: db.name)
            #expect(stored == [newID.uuidString.lowercased()])
            await first.pool.close()
            await second.pool.close()
        }
    }

    /// Issue 57: a read checks a kept id in its own statement, and only when it finds no row (a row found under the
    /// kept id and the key's own policy proves the id current). A kept id stale through another instance (the device
    /// erased, its key registered again as a new device with a log): the first instance's get and list of the new
    /// log find it, and the first instance keeps the new id; the get and list of a log that is not there answer
    /// nothing, with the kept id still current. Tried: with the reads' statements not checking (the plain page and
    /// get), the stale list and get found nothing.
    @Test func aReadChecksAKeptIdWhenItFindsNothing() async throws {
        try await TestDatabase.withMigrated { db in
            let (first, second) = (Database(pool: db.pool(size: 1)), Database(pool: db.pool(size: 1)))
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: first).register(DeviceInfo(model: "old"), as: key)
            let oldID = try #require(first.keptIDs.id(for: key.key))
            let logs = PoopLogRepository(database: first)
            let missing = UUID()
            #expect(try await logs.get(missing, as: key) == nil)
            #expect(try await logs.list(as: key).items.isEmpty)
            #expect(first.keptIDs.id(for: key.key) == oldID)

            _ = try await DeviceRepository(database: second).erase(as: key)
            _ = try await DeviceRepository(database: second).register(DeviceInfo(model: "new"), as: key)
            let newID = try #require(second.keptIDs.id(for: key.key))
            let (log, _) = try await PoopLogRepository(database: second).create(NewPoopLog(occurredAt: Date(), bristolType: 5), as: key)
            #expect(first.keptIDs.id(for: key.key) == oldID)  // stale, and not known to be yet

            #expect(try await logs.get(log.id, as: key)?.bristolType == 5)
            #expect(first.keptIDs.id(for: key.key) == newID)
            first.keptIDs.keep(oldID, for: key.key)
            #expect(try await logs.list(as: key).items.map(\.id) == [log.id])
            #expect(first.keptIDs.id(for: key.key) == newID)
            // A later page (a cursor's statement) that is empty checks too: the stale id is found out.
            first.keptIDs.keep(oldID, for: key.key)
            let past = LogCursor(occurredAt: Date(timeIntervalSince1970: 0), id: UUID()).encoded
            #expect(try await logs.list(before: past, as: key).items.isEmpty)
            #expect(first.keptIDs.id(for: key.key) == newID)
            #expect(try await logs.get(missing, as: key) == nil)
            #expect(first.keptIDs.id(for: key.key) == newID)
            await first.pool.close()
            await second.pool.close()
        }
    }

    /// Issue 59: a kept id is checked in the request's context statement (`poopypals_device_is` after its
    /// `set_config` calls), not in a statement of its own. That statement still leaves nothing in the session: were it
    /// taken for one that may (`SessionState`), the pool would reset the connection after every request, a round trip.
    @Test func theContextThatChecksAKeptIdLeavesNothingInTheSession() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: key)
            let kept = try #require(database.keptIDs.id(for: key.key))
            let (named, dirty) = try await database.asDevice(key, idempotent: true, readOnly: true) { tx in
                let named = try tx.storedID()
                _ = try tx.finalQuery("SELECT 1")
                return (named, tx.connection.sessionMayBeDirty)
            }
            #expect(named == kept)
            #expect(!dirty)
            await database.pool.close()
        }
    }

    /// The retry after a stale id looks the id up, whatever is kept by then: between the forgetting and the retry,
    /// another request of the same instance may keep the stale id again (its lookup ran before the other instance's
    /// change). Here the work itself keeps the stale id before each attempt. The retry trusted what was kept and the
    /// request failed with PPD01 (a 500 to the phone); it now reads the new device.
    @Test func theRetryAfterAStaleIdLooksItUpEvenWhenTheStaleIdIsKeptAgain() async throws {
        try await TestDatabase.withMigrated { db in
            let (first, second) = (Database(pool: db.pool(size: 1)), Database(pool: db.pool(size: 1)))
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: first).register(DeviceInfo(), as: key)
            let oldID = try #require(first.keptIDs.id(for: key.key))
            _ = try await DeviceRepository(database: second).erase(as: key)
            _ = try await DeviceRepository(database: second).register(DeviceInfo(), as: key)
            let newID = try #require(second.keptIDs.id(for: key.key))

            let attempts = Locked(0)
            let kept = first.keptIDs
            let named = try await first.asDevice(key, idempotent: false) { tx in
                attempts.withLock { $0 += 1 }
                kept.keep(oldID, for: key.key)
                let named = try tx.storedID()
                _ = try tx.finalQuery("SELECT 1")  // a kept id is checked in the pipeline of the next statement
                return named
            }
            #expect(named == newID)
            #expect(attempts.value == 2)
            #expect(first.keptIDs.id(for: key.key) == newID)
            await first.pool.close()
            await second.pool.close()
        }
    }

    /// The key rotated away through another instance: the first instance's kept id is stale, and the request is
    /// answered as for an unknown device (nothing listed, a write refused as not registered), not with the moved
    /// device's data and not with an error of the check.
    @Test func anIdRotatedAwayThroughAnotherInstanceIsAnUnknownDevice() async throws {
        try await TestDatabase.withMigrated { db in
            let (first, second) = (Database(pool: db.pool(size: 1)), Database(pool: db.pool(size: 1)))
            let (key, moved) = (try DeviceID(UUID()), try DeviceID(UUID()))
            _ = try await DeviceRepository(database: first).register(DeviceInfo(), as: key)
            let logs = PoopLogRepository(database: first)
            _ = try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 2), as: key)
            #expect(first.keptIDs.id(for: key.key) != nil)

            _ = try await DeviceRepository(database: second).rotate(as: key, to: moved)
            #expect(try await logs.list(as: key).items.isEmpty)
            #expect(first.keptIDs.id(for: key.key) == nil)
            await #expect(throws: RepositoryError.deviceNotRegistered) {
                try await logs.create(NewPoopLog(occurredAt: Date(), bristolType: 3), as: key)
            }
            #expect(try await logs.list(as: moved).items.count == 1)
            await first.pool.close()
            await second.pool.close()
        }
    }

    /// A request whose kept id is current costs what it did: one round trip for a one-statement request. A first
    /// request of a key the instance has not served costs one more (the lookup), and registration keeps the id in its
    /// own round trip.
    @Test func aKeptIdCostsNoRoundTripAndALookupOne() async throws {
        try await TestDatabase.withMigrated { db in
            let database = Database(pool: db.pool(size: 1))
            let key = try DeviceID(UUID())
            _ = try await DeviceRepository(database: Database(pool: db.pool(size: 1))).register(DeviceInfo(), as: key)
            let logs = PoopLogRepository(database: database)
            let roundTrips = { @Sendable () async throws -> Int in
                try await database.pool.withConnection { $0.roundTrips }
            }
            let before = try await roundTrips()
            _ = try await logs.list(as: key)  // not kept here: the lookup, then the list
            let afterFirst = try await roundTrips()
            _ = try await logs.list(as: key)
            let afterSecond = try await roundTrips()
            // The first list also asked the connection's extensions once (one round trip, per connection).
            #expect(afterFirst - before == 3)
            #expect(afterSecond - afterFirst == 1)
            let other = try DeviceID(UUID())
            _ = try await DeviceRepository(database: database).register(DeviceInfo(), as: other)
            let afterRegistration = try await roundTrips()
            _ = try await logs.list(as: other)
            #expect(afterRegistration - afterSecond == 1)
            #expect(try await roundTrips() - afterRegistration == 1)
            await database.pool.close()
        }
    }

    /// Bounded: two generations; the oldest is dropped when the newer fills; a key read from the older one moves up.
    @Test func theKeptIdsAreBoundedByTwoGenerations() {
        let kept = KeptDeviceIDs(perGeneration: 3)
        let keys = (0..<10).map { _ in UUID() }
        for key in keys { kept.keep(key, for: key) }
        #expect(kept.count <= 6)
        #expect(kept.id(for: keys[9]) == keys[9])
        #expect(kept.id(for: keys[0]) == nil)
        // keys 6…8 were in the newer generation when 9 came: now the older; reading 6 moves it up.
        #expect(kept.id(for: keys[6]) == keys[6])
        kept.keep(UUID(), for: UUID())
        kept.keep(UUID(), for: UUID())  // the newer (9, 6, +1) filled: 9, 6 and one survive as the older
        #expect(kept.id(for: keys[6]) == keys[6])
        #expect(kept.id(for: keys[7]) == nil)
        kept.forget(keys[6])
        #expect(kept.id(for: keys[6]) == nil)
        #expect(kept.count <= 6)
    }
}
