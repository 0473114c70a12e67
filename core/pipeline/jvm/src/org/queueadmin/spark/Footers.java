package org.queueadmin.spark;

import java.io.IOException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;

/**
 * Parquet footers read on the driver, kept for the next reads of the same file: the chunks of
 * a job read slices of one file, and each chunk's query read its footer at least twice (its
 * schema when the read is resolved, its row groups' bytes when it is planned). A footer is
 * kept under the file's path, length and modification time, so a file written again is read
 * again; at most MAX_FILES footers (the least recently used go first), none of more than
 * MAX_GROUPS row groups. The footers are only read, never changed, once here.
 */
final class Footers {

  static final int MAX_FILES = 8;
  static final int MAX_GROUPS = 4096;

  private record Key(String path, long length, long modified) {}

  private static final Map<Key, ParquetMetadata> KEPT = Collections.synchronizedMap(
      new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Key, ParquetMetadata> eldest) {
          return size() > MAX_FILES;
        }
      });

  private Footers() {}

  /** The footer of `status`'s file, read now or kept from a read of the same file. */
  static ParquetMetadata of(FileStatus status, Configuration conf) throws IOException {
    Key key = new Key(status.getPath().toString(), status.getLen(),
        status.getModificationTime());
    ParquetMetadata footer = KEPT.get(key);
    if (footer == null) {
      footer = SliceScan.readFooter(status.getPath(), conf);
      if (footer.getBlocks().size() <= MAX_GROUPS) {
        KEPT.put(key, footer);
      }
    }
    return footer;
  }

  /** The footer of the file at `path` (FileNotFoundException when there is none). */
  static ParquetMetadata of(Path path, Configuration conf) throws IOException {
    return of(path.getFileSystem(conf).getFileStatus(path), conf);
  }
}
