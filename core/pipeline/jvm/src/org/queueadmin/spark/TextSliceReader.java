package org.queueadmin.spark;

import java.io.IOException;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.apache.hadoop.mapreduce.lib.input.LineRecordReader;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;

import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Reads the lines that start in bytes [start, end) of a line-delimited file, with Hadoop's
 * LineRecordReader as Spark's text source does. A line starts at byte 0 or after a \n, \r or
 * \r\n; it is read whole, past the range's end if need be.
 *
 * <p>On FileSplit(s, length) LineRecordReader owns the lines starting in (s, s + length], and
 * the one at byte 0: a split not at 0 throws away everything up to its first line end, and reads
 * on while its position is &lt;= its end. So the split here is shifted one byte back, FileSplit(s
 * - 1, length) (FileSplit(0, length - 1) at byte 0): it owns exactly the lines starting in [s,
 * s + length), the contract callers count on -- a range that starts at a line's first byte has
 * the line. (Shifted back to byte 0, a range starting at byte 1 would keep the first line, which
 * LineRecordReader never throws away there: this reader drops it.) Consecutive ranges give every
 * line exactly once.
 *
 * <p>Rows are one string column, `value`, written into an UnsafeRow as TextFileFormat does.
 */
final class TextSliceReader implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  static final StructType SCHEMA = new StructType().add("value", DataTypes.StringType, true);

  private final Broadcast<SerializableConfiguration> conf;
  private final boolean noColumns; // count(*) and the like: rows with no fields

  TextSliceReader(Broadcast<SerializableConfiguration> conf, boolean noColumns) {
    this.conf = conf;
    this.noColumns = noColumns;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    SlicePartition part = (SlicePartition) partition;
    LineRecordReader lines = new LineRecordReader();
    long start = part.start > 0 ? part.start - 1 : 0;
    long length = part.start > 0 ? part.length : part.length - 1; // planned ranges are non-empty
    try {
      lines.initialize(new FileSplit(new Path(part.path), start, length, new String[0]),
          new TaskAttemptContextImpl(conf.value().value(), new TaskAttemptID()));
    } catch (IOException | RuntimeException e) {
      try {
        lines.close();
      } catch (IOException | RuntimeException suppressed) {
        e.addSuppressed(suppressed);
      }
      throw new IllegalStateException("Slices: cannot read " + part.what + ": " + e, e);
    }
    // From byte 1 the shifted split starts at 0, where it keeps the line at byte 0: not ours.
    boolean dropFirst = part.skipFirstLine || part.start == 1;
    return new LineReader(lines, dropFirst, noColumns);
  }

  private static final class LineReader implements PartitionReader<InternalRow> {
    private final LineRecordReader lines;
    private final UnsafeRowWriter writer = new UnsafeRowWriter(1);
    private final UnsafeRow empty = new UnsafeRow(0);
    private final boolean noColumns;
    private boolean skip;

    LineReader(LineRecordReader lines, boolean dropFirst, boolean noColumns) {
      this.lines = lines;
      this.skip = dropFirst;
      this.noColumns = noColumns;
    }

    @Override
    public boolean next() throws IOException {
      if (!lines.nextKeyValue()) {
        return false;
      }
      if (skip) {
        skip = false;
        return next();
      }
      return true;
    }

    @Override
    public InternalRow get() {
      if (noColumns) {
        return empty;
      }
      Text line = lines.getCurrentValue();
      writer.reset();
      writer.write(0, line.getBytes(), 0, line.getLength());
      return writer.getRow();
    }

    @Override
    public void close() throws IOException {
      lines.close();
    }
  }
}
