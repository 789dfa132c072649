// The compare chart: two horizontal bar panels (size as % of dense; decode GB/s), one bar per
// method, hand-written SVG with no dependencies.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "endor/compare.h"

namespace endor {

namespace {

struct Bar {
  std::string label;
  double value;
  const char* color;
  std::string text;  // printed after the bar
};

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, const char* f = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least v.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

// One panel at vertical offset y; returns its height.
int panel(std::ostringstream& o, int y, const std::string& title, const std::vector<Bar>& bars, double axis_max,
          const std::string& unit, double reference = -1, const std::string& reference_label = "") {
  const int left = 230, width = 560, bar_h = 22, gap = 8, top = 34;
  o << "<text x=\"20\" y=\"" << y + 20 << "\" class=\"title\">" << xml_escape(title) << "</text>\n";
  const int plot_h = int(bars.size()) * (bar_h + gap);
  // Grid lines and tick labels at fifths of the axis.
  for (int i = 0; i <= 5; ++i) {
    const double v = axis_max * i / 5;
    const int x = left + int(width * i / 5.0);
    o << "<line x1=\"" << x << "\" y1=\"" << y + top - 4 << "\" x2=\"" << x << "\" y2=\"" << y + top + plot_h
      << "\" class=\"grid\"/>\n";
    o << "<text x=\"" << x << "\" y=\"" << y + top + plot_h + 16 << "\" class=\"tick\" text-anchor=\"middle\">"
      << num(v, axis_max >= 10 ? "%.0f" : "%.1f") << unit << "</text>\n";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int by = y + top + int(i) * (bar_h + gap);
    const double w = std::max(0.0, std::min(1.0, b.value / axis_max)) * width;
    o << "<text x=\"" << left - 10 << "\" y=\"" << by + bar_h - 6 << "\" class=\"label\" text-anchor=\"end\">"
      << xml_escape(b.label) << "</text>\n";
    o << "<rect x=\"" << left << "\" y=\"" << by << "\" width=\"" << num(w, "%.1f") << "\" height=\"" << bar_h
      << "\" fill=\"" << b.color << "\"><title>" << xml_escape(b.label + ": " + b.text) << "</title></rect>\n";
    o << "<text x=\"" << left + int(w) + 6 << "\" y=\"" << by + bar_h - 6 << "\" class=\"value\">" << xml_escape(b.text)
      << "</text>\n";
  }
  if (reference >= 0) {
    const int x = left + int(std::min(1.0, reference / axis_max) * width);
    o << "<line x1=\"" << x << "\" y1=\"" << y + top - 8 << "\" x2=\"" << x << "\" y2=\"" << y + top + plot_h
      << "\" class=\"ref\"/>\n";
    o << "<text x=\"" << x << "\" y=\"" << y + top - 11 << "\" class=\"tick\" text-anchor=\"middle\">"
      << xml_escape(reference_label) << "</text>\n";
  }
  return top + plot_h + 30;
}

}  // namespace

std::string render_compare_svg(const CompareReport& r) {
  const CompareRow& t = r.total;
  const char* kEndor = "#2f6db5";
  const char* kZstd = "#e08a2c";
  const char* kBoth = "#7a4fa3";
  auto size_bars = [&](const CompareRow& row) {
    auto pct = [&](uint64_t b) { return row.dense_bytes ? 100.0 * double(b) / double(row.dense_bytes) : 0.0; };
    std::vector<Bar> bars;
    bars.push_back({"Endor", pct(row.endor_bytes), kEndor, num(pct(row.endor_bytes), "%.1f%%")});
    for (size_t i = 0; i < r.levels.size() && i < row.zstd_bytes.size(); ++i)
      bars.push_back({"zstd -" + std::to_string(r.levels[i]), pct(row.zstd_bytes[i]), kZstd,
                      num(pct(row.zstd_bytes[i]), "%.1f%%")});
    for (size_t i = 0; i < r.levels.size() && i < row.endor_zstd_bytes.size(); ++i)
      bars.push_back({"Endor + zstd -" + std::to_string(r.levels[i]), pct(row.endor_zstd_bytes[i]), kBoth,
                      num(pct(row.endor_zstd_bytes[i]), "%.1f%%")});
    return bars;
  };
  auto axis_for = [](const std::vector<Bar>& bars) {
    double m = 100;
    for (const Bar& b : bars) m = std::max(m, b.value);
    return nice_max(m);
  };
  auto gbps = [&](double s) { return s > 0 ? double(t.dense_bytes) / s / 1e9 : 0.0; };
  std::vector<Bar> speeds;
  speeds.push_back({"Endor, " + std::to_string(r.threads) + " threads", gbps(t.endor_mt_s), kEndor,
                    num(gbps(t.endor_mt_s), "%.2f GB/s")});
  speeds.push_back({"Endor, 1 thread", gbps(t.endor_1t_s), kEndor, num(gbps(t.endor_1t_s), "%.2f GB/s")});
  for (size_t i = 0; i < r.levels.size() && i < t.zstd_s.size(); ++i)
    speeds.push_back({"zstd -" + std::to_string(r.levels[i]) + ", 1 thread", gbps(t.zstd_s[i]), kZstd,
                      num(gbps(t.zstd_s[i]), "%.2f GB/s")});
  double max_speed = 0;
  for (const Bar& b : speeds) max_speed = std::max(max_speed, b.value);

  std::ostringstream body;
  int y = 56;
  if (r.linears.numel > 0) {
    const std::vector<Bar> lin = size_bars(r.linears);
    y += panel(body, y, "Size of the decoder Linears (% of dense, lower is better)", lin, axis_for(lin), "%", 100.0,
               "dense");
    y += 10;
  }
  const std::vector<Bar> all = size_bars(t);
  y += panel(body, y, "Size of all tensors (% of dense, lower is better)", all, axis_for(all), "%", 100.0, "dense");
  y += 10;
  y += panel(body, y, "Decode speed to dense on this CPU, all tensors (GB/s of dense output, higher is better)", speeds,
             nice_max(max_speed), "");
  y += 6;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"" << y + 20 << "\" viewBox=\"0 0 900 "
    << y + 20 << "\" font-family=\"Helvetica, Arial, sans-serif\">\n"
    << "<style>.title{font-size:15px;font-weight:bold;fill:#222}.label{font-size:13px;fill:#222}"
       ".value{font-size:12px;fill:#444}.tick{font-size:11px;fill:#666}.grid{stroke:#e4e4e4;stroke-width:1}"
       ".ref{stroke:#c0392b;stroke-width:1.5;stroke-dasharray:4 3}.sub{font-size:12px;fill:#555}</style>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"20\" y=\"24\" class=\"title\" font-size=\"17\">Endor vs zstd: " << xml_escape(r.description)
    << "</text>\n"
    << "<text x=\"20\" y=\"42\" class=\"sub\">" << r.rows.size() << " tensors, "
    << format_bytes(t.dense_bytes) << " dense; zstd on the dense bytes, Endor + zstd on the Endor bytes</text>\n"
    << body.str() << "</svg>\n";
  return o.str();
}

}  // namespace endor
