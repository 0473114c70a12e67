package org.queueadmin.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Reads slices of files straight from the input, with Spark's own readers:
 *
 * <pre>
 * spark.read.format("org.queueadmin.spark.Slices")
 *     .option("format", "parquet")                 // or "text"
 *     .option("slices", "[[path, a, b], ...]")     // parquet: row groups [a, b); text: bytes [a, b)
 *     .option("skipHeader", "true")                // text only: drop line 1 of a file
 *     .load()
 * </pre>
 *
 * Rows come in slice order, then file order. A Parquet slice is read by Spark's
 * VectorizedParquetRecordReader over the byte range that holds exactly its row groups (see
 * {@link SliceScan}); a text slice by Hadoop's LineRecordReader, giving the lines that start in
 * its range (see {@link TextSliceReader}), so that consecutive ranges give every line once. Big
 * slices are cut into several partitions (about 64 MB of compressed row groups, or 32 MB of
 * text; option partitionBytes) so that all cores work on one slice; option partitions instead
 * cuts the whole read into about that many (at least one per slice), for a read that shares the
 * cores with others running at once (a data job's chunks: one partition each when as many run
 * as there are cores, which spared a 162M-row job's two chunks 10-20 % against 64 MB ones).
 *
 * Spark makes one of these per read: this class and the table hold no state but the schema.
 */
public final class Slices implements TableProvider {

  public Slices() {}

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    Options o = Options.parse(options);
    if (!o.parquet) {
      return TextSliceReader.SCHEMA;
    }
    try {
      return SliceScan.parquetSchema(o.slices.get(0), SliceScan.driverHadoopConf(SQLConf.get()),
          SQLConf.get());
    } catch (FileNotFoundException e) {
      throw new IllegalArgumentException("Slices: cannot read "
          + o.slices.get(0).describe(true) + ": file not found", e);
    } catch (IOException e) {
      throw new IllegalArgumentException("Slices: cannot read the schema of "
          + o.slices.get(0).describe(true) + ": " + e, e);
    }
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning,
      Map<String, String> properties) {
    return new SliceTable(schema);
  }

  /** The table Spark scans: its schema is the first Parquet file's (or the text `value`). */
  static final class SliceTable implements SupportsRead {
    private final StructType schema;

    SliceTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "slices";
    }

    // Deprecated for columns() in Spark 4, whose default implementation derives them from this.
    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new SliceScan(Options.parse(options), schema);
    }
  }

  /** One [path, a, b] of the `slices` option. */
  record Slice(String path, long from, long to) {
    /** For messages: "row groups [0, 4) of /data/x.parquet" or "bytes [0, 100) of /x.csv". */
    String describe(boolean parquet) {
      return (parquet ? "row groups [" : "bytes [") + from + ", " + to + ") of " + path;
    }
  }

  /** The options of one read, checked: any mistake is an IllegalArgumentException naming it. */
  static final class Options {
    static final long PARQUET_PARTITION_BYTES = 64L << 20;
    static final long TEXT_PARTITION_BYTES = 32L << 20;

    final boolean parquet;
    final List<Slice> slices;
    final boolean skipHeader;
    final long partitionBytes;
    final int partitions; // 0: cut by partitionBytes
    final String datetimeRebaseMode; // null: the session's spark.sql.parquet.datetimeRebaseModeInRead
    final String int96RebaseMode; // null: the session's spark.sql.parquet.int96RebaseModeInRead

    private Options(boolean parquet, List<Slice> slices, boolean skipHeader, long partitionBytes,
        int partitions, String datetimeRebaseMode, String int96RebaseMode) {
      this.parquet = parquet;
      this.slices = slices;
      this.skipHeader = skipHeader;
      this.partitionBytes = partitionBytes;
      this.partitions = partitions;
      this.datetimeRebaseMode = datetimeRebaseMode;
      this.int96RebaseMode = int96RebaseMode;
    }

    static Options parse(CaseInsensitiveStringMap options) {
      String format = options.get("format");
      if (!"parquet".equals(format) && !"text".equals(format)) {
        throw new IllegalArgumentException(
            "Slices: option format must be \"parquet\" or \"text\", not " + quote(format));
      }
      boolean parquet = format.equals("parquet");
      long partitionBytes = options.getLong("partitionBytes",
          parquet ? PARQUET_PARTITION_BYTES : TEXT_PARTITION_BYTES);
      if (partitionBytes <= 0) {
        throw new IllegalArgumentException("Slices: partitionBytes must be > 0");
      }
      int partitions = options.getInt("partitions", 0);
      if (partitions < 0 || (partitions == 0 && options.containsKey("partitions"))) {
        throw new IllegalArgumentException("Slices: partitions must be > 0");
      }
      return new Options(parquet, parseSlices(options.get("slices")),
          options.getBoolean("skipHeader", false), partitionBytes, partitions,
          options.get("datetimeRebaseMode"), options.get("int96RebaseMode"));
    }

    private static List<Slice> parseSlices(String json) {
      String expected = "Slices: option slices must be a non-empty JSON list of "
          + "[path, start, end] (parquet: row groups, text: bytes)";
      if (json == null) {
        throw new IllegalArgumentException(expected + "; it is missing");
      }
      JsonNode root;
      try {
        root = new ObjectMapper().readTree(json);
      } catch (IOException e) {
        throw new IllegalArgumentException(expected + "; it is not JSON: " + e.getMessage(), e);
      }
      if (root == null || !root.isArray() || root.isEmpty()) {
        throw new IllegalArgumentException(expected + ", not " + abbreviate(json));
      }
      List<Slice> slices = new ArrayList<>(root.size());
      for (JsonNode item : root) {
        if (!item.isArray() || item.size() != 3 || !item.get(0).isTextual()
            || !item.get(1).canConvertToExactIntegral() || !item.get(2).canConvertToExactIntegral()
            || !item.get(1).canConvertToLong() || !item.get(2).canConvertToLong()) {
          throw new IllegalArgumentException(expected + "; this item is not: " + item);
        }
        slices.add(new Slice(item.get(0).asText(), item.get(1).asLong(), item.get(2).asLong()));
      }
      return List.copyOf(slices);
    }

    private static String quote(String s) {
      return s == null ? "nothing" : "\"" + s + "\"";
    }

    private static String abbreviate(String s) {
      return s.length() <= 200 ? s : s.substring(0, 200) + "...";
    }
  }
}
