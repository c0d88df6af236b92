import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

extension CitusTests.Distributed {
    /// A key taken by another device and its erasure begun between a registration's (or a rotation's) check that the
    /// key is free and its write of the key map (`KeyTakenAndErased`). On Citus `devices.key` is unique on no node, so
    /// only the functions' second look at the erasing keys keeps the key from a second device. Each test failed with
    /// that look taken out (sql/0033's registration: "created"; sql/0034's rotation: "rotated"). The lock wait is
    /// 25 s: the holder commits once the request is seen waiting, and a lock timeout of the loaded machine is not
    /// what is tested.
    @Test func aRegistrationOfAKeyTakenAndErasedMeanwhileSaysBeingErased() async throws {
        try await CitusCluster.withMigratedDatabase("citus_k_") { name, url, pool in
            let superuser = try CitusCluster.superuserURL(name, url: url)
            let database = Database(pool: pool, retryPolicy: .never, timeouts: RequestTimeouts(statement: .seconds(30), lock: .seconds(25)))
            try await KeyTakenAndErased.registration(database, superuser: superuser) { finished in
                try await CitusCluster.waitUntilASessionWaitsOnALock(superuser: superuser, unless: finished)
            }
        }
    }

    @Test func aRotationToAKeyTakenAndErasedMeanwhileSaysInUse() async throws {
        try await CitusCluster.withMigratedDatabase("citus_k_") { name, url, pool in
            let superuser = try CitusCluster.superuserURL(name, url: url)
            let database = Database(pool: pool, retryPolicy: .never, timeouts: RequestTimeouts(statement: .seconds(30), lock: .seconds(25)))
            try await KeyTakenAndErased.rotation(database, superuser: superuser) { finished in
                try await CitusCluster.waitUntilASessionWaitsOnALock(superuser: superuser, unless: finished)
            }
        }
    }
}
