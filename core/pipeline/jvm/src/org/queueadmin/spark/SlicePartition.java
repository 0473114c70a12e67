package org.queueadmin.spark;

import java.io.Serializable;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One task's share of the input: bytes [start, start + length) of a file, which for Parquet hold
 * exactly some row groups (see {@link SliceScan}). Everything an executor needs is decided on
 * the driver and carried here, so that a task reads the file's footer once (the reader does).
 */
final class SlicePartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  /** How the Parquet reader rebases old dates/timestamps: from the file's metadata and conf. */
  record Rebase(String datetimeMode, String datetimeTz, String int96Mode, String int96Tz,
      String convertTz) implements Serializable {}

  final String path;
  final long start;
  final long length;
  /** For messages: "row groups [0, 4) of file:/data/x.parquet", "bytes [0, 99) of ...". */
  final String what;
  /** Parquet: the rows of its row groups, checked when the reader ends; text: -1. */
  final long rows;
  /** Text: drop the first line (the file's header; only a partition starting at byte 0). */
  final boolean skipFirstLine;
  /** Parquet only. */
  final Rebase rebase;

  SlicePartition(String path, long start, long length, String what, long rows,
      boolean skipFirstLine, Rebase rebase) {
    this.path = path;
    this.start = start;
    this.length = length;
    this.what = what;
    this.rows = rows;
    this.skipFirstLine = skipFirstLine;
    this.rebase = rebase;
  }

  @Override
  public String toString() {
    return what;
  }
}
