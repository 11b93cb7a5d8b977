// Reattach buffers: RING, DROP and NONE over a byte capacity (RAWP §7.1.1, notes §7, §15.4).
// The same rules as protocol/buffers.py, which this mirrors line for line:
//  * RING keeps the longest run of the newest frames that fits (a frame larger than the
//    capacity evicts everything and is itself lost);
//  * DROP keeps the longest run of the oldest frames that fits (once one does not fit, it and
//    every later frame are lost);
//  * NONE keeps nothing.
// lost_frame_count is exact; buffer_high_watermark is the most bytes held at any moment.
import type { BufferStatus } from "./generated/frames.js";
import type { Policy } from "./frames.js";

export const POLICIES: readonly Policy[] = ["RING", "DROP", "NONE"];

export interface BufferedItem<T> {
  /** The encoded envelope. */
  readonly data: string;
  /** Its size in bytes (UTF-8). */
  readonly size: number;
  readonly value: T;
}

export function bufferStatus(
  policy: Policy,
  lostFrameCount: number | null,
  highWatermark: number,
  truncated = false,
): BufferStatus {
  if (lostFrameCount !== null && lostFrameCount < 0) throw new RangeError("lost_frame_count must be >= 0");
  if (highWatermark < 0) throw new RangeError("buffer_high_watermark must be >= 0");
  const lostOrUnknown = lostFrameCount === null || lostFrameCount > 0;
  const status: BufferStatus = {
    policy_applied: policy,
    truncated: truncated || lostOrUnknown,
    buffer_high_watermark: highWatermark,
  };
  if (lostFrameCount !== null) status.lost_frame_count = lostFrameCount;
  return status;
}

export class BoundedBuffer<T> {
  readonly policy: Policy;
  readonly capacityBytes: number;
  private itemsHeld: BufferedItem<T>[] = [];
  private size = 0;
  private peak = 0;
  private lost = 0;
  private extraLost = 0;
  private closed = false;
  private unknownLoss = false;

  constructor(policy: Policy, capacityBytes: number) {
    if (!POLICIES.includes(policy)) throw new RangeError(`policy must be one of ${POLICIES.join(", ")}`);
    if (capacityBytes < 0) throw new RangeError("capacity_bytes must be >= 0");
    this.policy = policy;
    this.capacityBytes = capacityBytes;
  }

  /** Offer the next (newest) frame; true when kept. */
  push(data: string, size: number, value: T): boolean {
    if (this.policy === "NONE") {
      this.lost += 1;
      return false;
    }
    if (this.policy === "DROP") {
      if (this.closed || this.size + size > this.capacityBytes) {
        this.closed = true;
        this.lost += 1;
        return false;
      }
    } else if (size > this.capacityBytes) {
      this.lost += this.itemsHeld.length + 1;
      this.itemsHeld = [];
      this.size = 0;
      return false;
    } else {
      while (this.size + size > this.capacityBytes) {
        const evicted = this.itemsHeld.shift();
        if (evicted === undefined) break;
        this.size -= evicted.size;
        this.lost += 1;
      }
    }
    this.itemsHeld.push({ data, size, value });
    this.size += size;
    if (this.size > this.peak) this.peak = this.size;
    return true;
  }

  addLost(count: number): void {
    if (count < 0) throw new RangeError("count must be >= 0");
    this.extraLost += count;
  }

  markTruncated(): void {
    this.unknownLoss = true;
  }

  /**
   * Drop the newest held frame matching `predicate` and every older one (the other side has
   * them). RING's evicted frames were older still, so they stop counting as lost.
   */
  discardThrough(predicate: (value: T) => boolean): number {
    let match = -1;
    for (let i = this.itemsHeld.length - 1; i >= 0; i--) {
      if (predicate(this.itemsHeld[i]!.value)) {
        match = i;
        break;
      }
    }
    if (match < 0) return 0;
    for (const item of this.itemsHeld.splice(0, match + 1)) this.size -= item.size;
    if (this.policy === "RING") this.lost = 0;
    return match + 1;
  }

  /** Remove the held items matching `predicate` (a committed or refused frame). */
  remove(predicate: (value: T) => boolean): number {
    const before = this.itemsHeld.length;
    this.itemsHeld = this.itemsHeld.filter((item) => {
      if (!predicate(item.value)) return true;
      this.size -= item.size;
      return false;
    });
    return before - this.itemsHeld.length;
  }

  /** The frames held (oldest first); the buffer starts over. */
  drain(): BufferedItem<T>[] {
    const items = this.itemsHeld;
    this.itemsHeld = [];
    this.size = 0;
    this.peak = 0;
    this.lost = 0;
    this.extraLost = 0;
    this.closed = false;
    this.unknownLoss = false;
    return items;
  }

  get items(): BufferedItem<T>[] {
    return [...this.itemsHeld];
  }
  get length(): number {
    return this.itemsHeld.length;
  }
  get sizeBytes(): number {
    return this.size;
  }
  get highWatermark(): number {
    return this.peak;
  }
  get lostFrameCount(): number | null {
    return this.unknownLoss ? null : this.lost + this.extraLost;
  }
  get truncated(): boolean {
    return this.unknownLoss || this.lost + this.extraLost > 0;
  }
  /** DROP: a frame did not fit, so every later frame is lost too. */
  get dropClosed(): boolean {
    return this.closed;
  }

  status(): BufferStatus {
    return bufferStatus(this.policy, this.lostFrameCount, this.peak);
  }
}

/** Bound a backlog (oldest first) by a buffer policy, as the master does (notes §7, §15.4). */
export function selectBacklog<T>(
  items: Iterable<BufferedItem<T>>,
  policy: Policy,
  capacityBytes: number,
): { items: BufferedItem<T>[]; status: BufferStatus } {
  const buffer = new BoundedBuffer<T>(policy, capacityBytes);
  for (const item of items) buffer.push(item.data, item.size, item.value);
  return { items: buffer.items, status: buffer.status() };
}
